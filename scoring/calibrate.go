package scoring

import "math"

// calibrator learns one worker's step model online from observed TTFTs.
//
// It is a recursive least-squares fit with exponential forgetting, started
// from the configured prior: parameters are kept relative to the prior
// (theta[i] = 1 means "as the prior says") with covariance spread²·I, so
// before any data the prediction is the prior's and every direction the
// data does not excite stays near it. Each observation is weighted by a
// Huber weight on its residual standardised by the predictive spread (noise
// plus parameter uncertainty), so a worker that is really 2× off the prior
// moves fast while a single outlier among settled data barely does.
//
// A calibrator is not safe for concurrent use; the router guards it.
type calibrator struct {
	prior StepModel
	theta [numParams]float64
	p     [numParams][numParams]float64
	// pmax is the prior variance, the cap on each diagonal entry of p
	// against covariance wind-up under forgetting.
	pmax float64
	// scale is a robust running estimate of the relative residual spread.
	scale float64
	n     int
	// run counts consecutive outliers with the same sign; runSign is it.
	// A run of resetRun is a change of regime (the worker got slower or
	// faster), not noise, and resets the covariance to the prior's so the
	// fit moves at once; resets counts those.
	run     int
	runSign float64
	resets  int
}

// resetRun is the number of consecutive same-sign outliers taken as a
// change of regime. With 5% independent outliers that happens by chance
// about once in 3·10⁵ outcomes.
const resetRun = 4

func newCalibrator(prior StepModel, spread, noise float64) *calibrator {
	c := &calibrator{prior: prior, pmax: spread * spread, scale: noise}
	for i := range c.theta {
		c.theta[i] = 1
		c.p[i][i] = c.pmax
	}
	return c
}

// model returns the current step model.
func (c *calibrator) model() StepModel {
	v := c.prior.vector()
	for i := range v {
		v[i] *= c.theta[i]
	}
	return stepModelOf(v)
}

// minTheta keeps every learned parameter at least this share of its prior,
// so that no cost becomes zero or negative.
const minTheta = 0.02

// observe updates the fit with features x (as returned by workload.features)
// and the observed time y in seconds. It reports whether the observation was
// down-weighted as an outlier.
func (c *calibrator) observe(x [numParams]float64, y float64, cfg *Config) (outlier bool) {
	if !(y > 0) || math.IsInf(y, 0) {
		return false
	}
	pv := c.prior.vector()
	var z [numParams]float64 // features in prior-relative units
	for i := range z {
		z[i] = x[i] * pv[i]
	}
	yhat := dot(z, c.theta)
	if !(yhat > 0) {
		return false
	}
	var pz [numParams]float64
	for i := range pz {
		for j := range z {
			pz[i] += c.p[i][j] * z[j]
		}
	}
	zpz := dot(z, pz)
	noise := c.scale * yhat
	r := noise * noise
	e := y - yhat
	std := math.Sqrt(r + zpz)
	w := 1.0
	if a := math.Abs(e) / std; a > cfg.HuberK {
		w = cfg.HuberK / a
		outlier = true
		if sign := math.Copysign(1, e); c.run > 0 && sign == c.runSign {
			c.run++
		} else {
			c.run, c.runSign = 1, sign
		}
	} else {
		c.run = 0
	}
	if c.run >= resetRun {
		c.run = 0
		c.resets++
		for i := range c.p {
			for j := range c.p[i] {
				c.p[i][j] = 0
			}
			c.p[i][i] = c.pmax
		}
		for i := range pz {
			pz[i] = c.pmax * z[i]
		}
		zpz = c.pmax * dot(z, z)
		std = math.Sqrt(r + zpz)
		w = min(1, cfg.HuberK*std/math.Abs(e))
	}
	// Robust scale: relative residual, clipped so outliers move it little.
	rel := math.Abs(e) / yhat
	c.scale += 0.05 * (min(1.25*rel, 3*c.scale) - c.scale)
	c.scale = max(c.scale, 0.01)

	denom := r/w + zpz
	var k [numParams]float64
	for i := range k {
		k[i] = pz[i] / denom
	}
	for i := range c.theta {
		c.theta[i] = max(c.theta[i]+k[i]*e, minTheta)
	}
	lambda := cfg.Forgetting
	for i := range c.p {
		for j := range c.p[i] {
			c.p[i][j] = (c.p[i][j] - k[i]*pz[j]) / lambda
		}
	}
	// Cap each variance at the prior's by a symmetric diagonal scaling,
	// which keeps p positive semi-definite.
	var s [numParams]float64
	for i := range s {
		s[i] = 1
		if c.p[i][i] > c.pmax {
			s[i] = math.Sqrt(c.pmax / c.p[i][i])
		}
	}
	for i := range c.p {
		for j := range c.p[i] {
			c.p[i][j] *= s[i] * s[j]
		}
	}
	c.n++
	return outlier
}
