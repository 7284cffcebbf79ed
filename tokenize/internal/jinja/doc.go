// Package jinja is the subset of jinja2 that Hugging Face chat templates use,
// with the semantics of the environment transformers renders them in:
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension, the {% generation %} tag, a tojson filter that is
// Python's json.dumps (ensure_ascii off, no HTML escaping), and the globals
// raise_exception, strftime_now, namespace and dict.
//
// Values follow Python: dicts keep insertion order, ints are exact (int64 or
// *big.Int) and distinct from floats (1.0 prints as 1.0), strings index by
// code point, str() and repr() match CPython. ParseJSON decodes request
// bodies into such a value tree as json.loads does.
//
// Compile a template once with Compile; a *Template is safe for concurrent
// Render calls. Syntax outside the supported subset (recursive loops, call
// blocks, imports, includes) is a compile error rather than an approximation.
package jinja
