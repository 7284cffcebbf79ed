// Package jinja is the subset of jinja2 that Hugging Face chat templates use,
// with the semantics of the environment transformers renders them in:
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension, the {% generation %} tag, a tojson filter that is
// Python's json.dumps (ensure_ascii off, no HTML escaping), and the globals
// raise_exception, strftime_now, namespace and dict.
//
// Values follow Python: dicts keep insertion order and accept int, float,
// bool and None keys as well as strings; ints are exact (int64 or *big.Int)
// and distinct from floats (1.0 prints as 1.0); strings index by code point;
// str() and repr() match CPython; map, select, reverse and friends return
// single-use iterators (always true, no len(), not JSON serializable) and
// dict.items() returns a view; safe and escape return Markup, to which an
// added plain string is HTML-escaped first, as markupsafe does. ParseJSON
// decodes request bodies into such a value tree as json.loads does.
//
// Compile a template once with Compile; a *Template is safe for concurrent
// Render calls, and Render never modifies the values it is given. Syntax
// outside the supported subset (recursive loops, call blocks, imports,
// includes, raw blocks, printf-style % formatting) is an error rather than an
// approximation. Rendering is bounded: macro recursion depth, output size,
// range and repetition sizes.
package jinja
