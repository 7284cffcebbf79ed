package scoring

import "math"

// calibrator learns one worker's step model online from observed TTFTs.
//
// It is a weighted least-squares fit with exponential forgetting,
// regularised towards a centre and bounded below. Parameters are kept
// relative to the configured prior (theta[i] = 1 means "as the prior
// says"). The data enter as normal equations (a, b), each outcome weighted
// by the inverse of its expected noise variance and multiplied by the
// forgetting factor on every new one; the centre (first the prior) enters
// with a fixed precision 1/spread² per parameter, which is never forgotten,
// so every direction the data do not excite stays near it. Each update
// solves the whole problem again with every parameter at least minTheta of
// its prior (an active-set solve of five unknowns), rather than clipping a
// recursive update: clipping one parameter of a nearly collinear pair lets
// the other run away.
//
// Each observation is weighted by a Huber weight on its residual
// standardised by the predictive spread (noise plus parameter
// uncertainty), so a worker that is really 2× off the prior moves fast
// while a single outlier among settled data barely does.
//
// A calibrator is not safe for concurrent use; the router guards it.
type calibrator struct {
	prior StepModel
	theta [numParams]float64
	// a and b are the forgetting-weighted normal equations of the data, in
	// prior-relative units; centre and prec the regularisation.
	a      [numParams][numParams]float64
	b      [numParams]float64
	centre [numParams]float64
	prec   float64
	// scale is a robust running estimate of the relative residual spread.
	scale float64
	n     int
	// run counts consecutive outliers with the same sign; runSign is it.
	// A run of resetRun is a change of regime (the worker got slower or
	// faster), not noise: the data so far are dropped and the fit is
	// regularised towards its current estimate, so it moves at once;
	// resets counts those.
	run     int
	runSign float64
	resets  int
}

// resetRun is the number of consecutive same-sign outliers taken as a
// change of regime. With 5% independent outliers that happens by chance
// about once in 3·10⁵ outcomes.
const resetRun = 4

func newCalibrator(prior StepModel, spread, noise float64) *calibrator {
	c := &calibrator{prior: prior, prec: 1 / (spread * spread), scale: noise}
	for i := range c.theta {
		c.theta[i] = 1
		c.centre[i] = 1
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

// restart drops the data and takes centre (prior-relative) as both the
// model and what the fit is regularised towards, until new outcomes say
// otherwise: they outweigh it from the first one.
func (c *calibrator) restart(centre [numParams]float64) {
	c.a, c.b = [numParams][numParams]float64{}, [numParams]float64{}
	c.centre, c.theta = centre, centre
	c.run = 0
}

// system returns the regularised normal equations.
func (c *calibrator) system() (a [numParams][numParams]float64, b [numParams]float64) {
	a, b = c.a, c.b
	for i := range a {
		a[i][i] += c.prec
		b[i] += c.prec * c.centre[i]
	}
	return a, b
}

// observe updates the fit with features x (as returned by workload.features)
// and the observed time y in seconds. It reports whether the observation was
// down-weighted as an outlier.
//
// A run of resetRun same-sign outliers restarts the fit, unless mayReset
// (nil: always) declines for that sign: then the run goes on, each outlier
// down-weighted, and the restart waits until mayReset agrees.
func (c *calibrator) observe(x [numParams]float64, y float64, cfg *Config, mayReset func(sign float64) bool) (outlier bool) {
	return c.observeFrom(x, y, cfg, mayReset, full)
}

// observeFrom is observe for an outcome of a source of influence inf
// (influence.go): its weight in the fit and in the residual scale is
// scaled by inf.weight, and when the source disagrees with the others its
// outcome neither extends nor breaks a run towards a restart.
func (c *calibrator) observeFrom(x [numParams]float64, y float64, cfg *Config, mayReset func(sign float64) bool, inf influence) (outlier bool) {
	weight := inf.weight
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
	// The noise is relative to the larger of the prediction and the
	// outcome: relative to the prediction alone, an outcome far above a
	// prediction far too low (a worker's first, against the prior) would
	// weigh as much more as the prediction was small, and outweigh many
	// later ones (TestCalibrationReplay).
	noise := c.scale * max(yhat, y)
	r := noise * noise
	// The predictive variance of yhat is zᵀA⁻¹z in units where each
	// outcome's noise variance is r.
	a, _ := c.system()
	u, ok := solve(a, z, [numParams]bool{})
	if !ok {
		return false
	}
	e := y - yhat
	std := math.Sqrt(r + dot(z, u))
	w := 1.0
	if k := math.Abs(e) / std; k > cfg.HuberK {
		w = cfg.HuberK / k
		outlier = true
	}
	// A disagreeing source's outcomes say nothing of a regime: they
	// neither extend nor break a run.
	switch sign := math.Copysign(1, e); {
	case inf.disagrees:
	case !outlier:
		c.run = 0
	case c.run > 0 && sign == c.runSign:
		c.run++
	default:
		c.run, c.runSign = 1, sign
	}
	if c.run >= resetRun && (mayReset == nil || mayReset(c.runSign)) {
		c.run = 0
		c.resets++
		c.a, c.b = [numParams][numParams]float64{}, [numParams]float64{}
		c.centre = c.theta
		std = math.Sqrt(r + dot(z, z)/c.prec)
		w = min(1, cfg.HuberK*std/math.Abs(e))
	}
	// Robust scale: relative residual, clipped so outliers move it little.
	rel := math.Abs(e) / yhat
	c.scale += 0.05 * weight * (min(1.25*rel, 3*c.scale) - c.scale)
	c.scale = max(c.scale, 0.01)

	lambda := cfg.Forgetting
	if weight < 1 {
		lambda = math.Pow(lambda, weight) // forgets less for less weight
	}
	wr := w * weight / r
	for i := range c.a {
		for j := range c.a[i] {
			c.a[i][j] = lambda*c.a[i][j] + wr*z[i]*z[j]
		}
		c.b[i] = lambda*c.b[i] + wr*z[i]*y
	}
	if theta, ok := solveBounded(c.system()); ok {
		c.theta = theta
	}
	c.n++
	return outlier
}

// solveBounded minimises ½θᵀAθ − bᵀθ subject to θ ≥ minTheta, for a
// symmetric positive definite A, by an active-set method: parameters that
// would fall below the bound are held at it and the rest solved again,
// and a held one is released when the objective would fall by raising it.
func solveBounded(a [numParams][numParams]float64, b [numParams]float64) ([numParams]float64, bool) {
	var held [numParams]bool
	var theta [numParams]float64
	for range 4 * numParams {
		// Solve for the free parameters with the held ones at the bound.
		rhs := b
		for i := range rhs {
			for j := range held {
				if held[j] {
					rhs[i] -= a[i][j] * minTheta
				}
			}
		}
		x, ok := solve(a, rhs, held)
		if !ok {
			return theta, false
		}
		worst, low := -1, minTheta
		for i := range x {
			if !held[i] && x[i] < low {
				worst, low = i, x[i]
			}
		}
		for i := range x {
			if held[i] {
				x[i] = minTheta
			}
		}
		if worst >= 0 {
			held[worst] = true
			continue
		}
		// Release the held parameter whose gradient most wants it raised.
		release, grad := -1, -1e-12
		for i := range held {
			if !held[i] {
				continue
			}
			g := -b[i]
			for j := range x {
				g += a[i][j] * x[j]
			}
			if g < grad {
				release, grad = i, g
			}
		}
		theta = x
		if release < 0 {
			return theta, true
		}
		held[release] = false
	}
	return theta, true
}

// solve solves A x = b over the parameters not in skip (whose x is 0), by
// Gaussian elimination with partial pivoting. It reports false for a
// singular system.
func solve(a [numParams][numParams]float64, b [numParams]float64, skip [numParams]bool) ([numParams]float64, bool) {
	var idx [numParams]int
	n := 0
	for i := range skip {
		if !skip[i] {
			idx[n] = i
			n++
		}
	}
	var m [numParams][numParams + 1]float64
	for r := range n {
		for c := range n {
			m[r][c] = a[idx[r]][idx[c]]
		}
		m[r][n] = b[idx[r]]
	}
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[p][col]) {
				p = r
			}
		}
		if !(math.Abs(m[p][col]) > 1e-300) {
			return [numParams]float64{}, false
		}
		m[col], m[p] = m[p], m[col]
		for r := col + 1; r < n; r++ {
			f := m[r][col] / m[col][col]
			for c := col; c <= n; c++ {
				m[r][c] -= f * m[col][c]
			}
		}
	}
	var x [numParams]float64
	for r := n - 1; r >= 0; r-- {
		s := m[r][n]
		for c := r + 1; c < n; c++ {
			s -= m[r][c] * x[idx[c]]
		}
		x[idx[r]] = s / m[r][r]
	}
	return x, true
}
