#!/usr/bin/env python3
"""Random expression goldens from the real reference: templates built from
a small grammar (literals, variables, operators, filters, tests, methods,
subscripts, for loops) rendered by transformers' jinja2 environment.

Usage: python gen_random_cases.py SEED COUNT OUT.json   (in /work/venvs/tok-chat)

Left out, as known differences that no real chat template relies on:
slicing (jinja folds constant slices at compile time into undefined values
but raises on variables), printf-style '%' on strings, and methods called on
Markup values (they return Markup, printed as Markup('...') inside lists).
"""
import json, random, sys, copy
from transformers.utils.chat_template_utils import _compile_jinja_template
random.seed(int(sys.argv[1]))
V = {"n": 7, "m": -3, "z": 0, "f": 2.5, "g": -0.5, "big": 123456789012345678901234567890, "b": True, "nn": None,
     "s": " Hello, World ", "e": "", "u": "héllo wörld", "l": [3, 1, 2], "ls": ["b", "A", "c"], "el": [],
     "d": {"z": 1, "a": "x", "k": [1, 2]}, "ed": {}, "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
atoms = ["n", "m", "z", "f", "g", "big", "b", "nn", "s", "e", "u", "l", "ls", "el", "d", "ed", "msgs", "q",
         "1", "0", "2.0", "-1", "'a'", "'ab'", "''", "none", "true", "false", "[1, 'a']", "{'k': 1}", "(1, 2)", "1e3", "0.1"]
filters = ["length", "join(',')", "first", "last", "sort", "upper", "lower", "trim", "tojson", "string", "int", "float", "list",
           "default('D')", "reverse|list", "unique|list", "map('string')|list", "select|list", "items|list", "dictsort", "abs",
           "round", "capitalize", "title", "sum", "min", "max", "count", "wordcount", "center(5)",
           "tojson(indent=2)", "replace('l', 'L')", "batch(2)|list", "join", "indent(2)", "map(attribute='role')|list"]
tests = ["defined", "undefined", "none", "string", "number", "integer", "float", "iterable", "mapping", "sequence", "odd", "even",
         "divisibleby 2", "eq 1", "true", "false", "boolean", "lower", "upper", "in [1, 7]", "sameas none"]
binops = ["+", "-", "*", "/", "//", "~", "==", "!=", "<", "<=", ">", "in", "not in", "and", "or", "**"]
methods = ["split()", "split(',')", "strip()", "lstrip()", "startswith('H')", "endswith('d ')", "upper()", "replace('o', '0')",
           "get('z')", "get('q', 5)", "keys()|list", "values()|list", "items()|list", "title()", "find('l')", "count('l')", "index(1)",
           "splitlines()", "rstrip('d ')", "format(1)"]
def expr(d=0):
    r = random.random()
    if d > 2 or r < 0.3:
        return random.choice(atoms)
    if r < 0.45:
        return "%s|%s" % (expr(d+1), random.choice(filters))
    if r < 0.55:
        return "(%s is %s%s)" % (expr(d+1), random.choice(["", "not "]), random.choice(tests))
    if r < 0.75:
        return "(%s %s %s)" % (expr(d+1), random.choice(binops), expr(d+1))
    if r < 0.82:
        return "(%s).%s" % (expr(d+1), random.choice(methods))
    if r < 0.88:
        return "(%s)[%s]" % (expr(d+1), random.choice(["0", "-1", "'z'", "'role'", "'a'"]))
    if r < 0.93:
        return "(%s if %s else %s)" % (expr(d+1), expr(d+1), expr(d+1))
    return "(not %s)" % expr(d+1)
out = []
skipped = 0
for i in range(int(sys.argv[2])):
    t = "{{ %s }}" % expr()
    if random.random() < 0.2:
        t = "{%% for x in %s %%}[{{ x }}|{{ loop.index }}]{%% else %%}E{%% endfor %%}" % expr()
    try:
        w, err = _compile_jinja_template(t).render(**copy.deepcopy(V)), None
    except Exception as ex:
        w, err = None, type(ex).__name__
    if w is not None and " at 0x" in w:
        continue
    out.append({"t": t, "want": w, "error": err})
json.dump({"vars": V, "cases": out}, open(sys.argv[3], "w"), ensure_ascii=False, indent=0)
print(len(out), sum(1 for o in out if o["error"]))
