#!/usr/bin/env python3
"""Differential goldens for the jinja subset, rendered by the real reference:
the template environment transformers builds for chat templates
(transformers.utils.chat_template_utils._compile_jinja_template, jinja2 3.1.6).

Usage: python gen_cases.py   (in /work/venvs/tok-chat; writes cases.json)
Each case is {"name", "template", "vars", "want"} or, when the reference
raises, {"name", "template", "vars", "error": "<exception type>"}.
"""
import json
import os

from transformers.utils.chat_template_utils import _compile_jinja_template

V = {
    "s": "  Hello, World  ",
    "n": 7,
    "f": 2.5,
    "neg": -3,
    "big": 123456789012345678901234567890,
    "b": True,
    "none": None,
    "l": [3, 1, 2],
    "ls": ["b", "A", "c"],
    "d": {"z": 1, "a": [1, 2.0, None, True], "m": {"k": "v"}, "items": "key-named-items"},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}],
    "u": "ünï 日本 😀",
    "empty": "",
    "el": [],
    "ed": {},
    "fl": [1.0, 1e16, 1e-5, 0.1, 123456789.125, -0.0, 1.5e300, 5e-324],
}

T = [
    # output and literals
    ("print_values", "{{ s }}|{{ n }}|{{ f }}|{{ neg }}|{{ big }}|{{ b }}|{{ none }}|{{ l }}|{{ d }}|{{ u }}"),
    ("print_floats", "{% for x in fl %}{{ x }} {% endfor %}"),
    ("literals", "{{ 1 }} {{ 1.5 }} {{ 1_000 }} {{ 1e3 }} {{ 'a' 'b' }} {{ \"q\\\"\" }} {{ 'x\\ny' }} {{ 'tab\\t' }} {{ '\\u00e9\\x41' }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ {'a': 1, 'b': [1]} }} {{ true }} {{ False }} {{ None }}"),
    ("repr_strings", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n', 'é', '\\x01'] }}"),
    # whitespace control
    ("trim_blocks", "A\n{% if true %}\nB\n{% endif %}\nC\n"),
    ("lstrip_blocks", "  {% if true %}\n    X\n  {% endif %}\n  {{ 'v' }}\n"),
    ("minus_strip", "a   {%- if true -%}   b   {%- endif -%}   c {{- ' d ' -}} e"),
    ("plus_keep", "  {%+ if true %}x{% endif %}\n"),
    ("comment_trim", "a\n{# comment #}\nb\n  {#- c -#}  \nc"),
    ("trailing_newline", "x\n"),
    ("crlf", "a\r\nb{% if true %}\r\nc{% endif %}"),
    # operators
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2.0 }} {{ 3 * 1.5 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}"),
    ("floor_negative_divisor", "{{ 7 // -2 }} {{ 1 // -2 }} {{ -7 // -2 }} {{ 7 % -2 }} {{ -7 % -2 }} {{ big // -7 }} {{ big % -7 }} {{ -big // 7 }} {{ -9223372036854775807 - 1 }} {{ (-9223372036854775807 - 1) // -1 }} {{ 4294967296 * 4294967296 }}"),
    ("bigint_arith", "{{ big + 1 }} {{ big * 2 }} {{ 9223372036854775807 + 1 }} {{ -9223372036854775807 - 2 }} {{ big // 7 }} {{ big % 7 }}"),
    ("string_ops", "{{ 'ab' * 3 }} {{ 2 * 'xy' }} {{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ 'a' ~ 1 ~ 1.0 ~ none ~ true }}"),
    ("compare", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ none == none }} {{ 'a' != 'a' }} {{ {'a': 1} == {'a': 1.0} }}"),
    ("in_ops", "{{ 'ell' in 'hello' }} {{ 2 in l }} {{ 'z' in d }} {{ 'q' not in d }} {{ 5 not in l }}"),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or none }} {{ not l }} {{ not el }} {{ el or 'empty' }}"),
    ("condexpr", "{{ 'yes' if b else 'no' }} {{ 'yes' if none else 'no' }} {{ 'a' if false }}|"),
    ("unary", "{{ -n }} {{ +n }} {{ -f }} {{ -(1) }} {{ - 2 ** 2 }}"),
    # attribute and item access
    ("getattr_dict", "{{ d.z }} {{ d['z'] }} {{ d.missing }}|{{ d['missing'] }}|{{ d.items is defined }}|{{ d['items'] }}|{{ d.m.k }}"),
    ("getitem_list", "{{ l[0] }} {{ l[-1] }} {{ l[10] }}|{{ msgs[1].content }} {{ msgs[2]['tool_calls'][0].function.arguments.x }}"),
    ("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ 'hello'[1:3] }} {{ u[::-1] }} {{ u[2] }} {{ l[5:] }} {{ l[-10:2] }}"),
    ("none_attr", "{{ none.x }}|"),
    # statements
    ("for_loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{% if not loop.first %}{{ loop.previtem }}{% endif %}{% if not loop.last %}{{ loop.nextitem }}{% endif %},{% endfor %}"),
    ("for_else", "{% for x in el %}{{ x }}{% else %}empty{% endfor %}"),
    ("for_filter", "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}"),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
    ("for_dict", "{% for k in d %}{{ k }},{% endfor %}"),
    ("for_string", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}"),
    ("loop_controls", "{% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("nested_loops", "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}"),
    ("set_scoping", "{% set c = 0 %}{% for i in [1,2,3] %}{% set c = c + i %}{{ c }}{% endfor %}|{{ c }}"),
    ("set_in_if", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}"),
    ("namespace", "{% set ns = namespace(c=0, s='') %}{% for i in l %}{% set ns.c = ns.c + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }} {{ ns.s }}"),
    ("set_tuple", "{% set a, b = [1, 2] %}{{ a }}{{ b }}"),
    ("set_block", "{% set x %}inner {{ n }}{% endset %}[{{ x }}]"),
    ("macro", "{% macro m(a, b='B', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m() }}"),
    ("macro_recursion", "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(4) }}"),
    ("macro_sees_globals", "{% macro m() %}{{ n }}{{ s | trim }}{% endmacro %}{% set n = 99 %}{{ m() }}"),
    ("macro_set_local", "{% macro m() %}{% set n = 1 %}{{ n }}{% endmacro %}{{ m() }}{{ n }}"),
    ("with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}|"),
    ("filter_block", "{% filter upper %}abc {{ s }}{% endfilter %}"),
    ("generation_tag", "a{% generation %}b{{ n }}{% endgeneration %}c"),
    ("if_elif", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}{% endfor %}"),
    # tests
    ("tests", "{{ n is defined }} {{ q is defined }} {{ q is undefined }} {{ none is none }} {{ s is string }} {{ n is number }} {{ b is number }} {{ f is float }} {{ n is integer }} {{ b is integer }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ q is iterable }} {{ none is iterable }} {{ l is sequence }} {{ b is true }} {{ 1 is true }} {{ false is false }} {{ b is boolean }}"),
    ("tests_args", "{{ n is divisibleby 7 }} {{ n is divisibleby(2) }} {{ n is eq 7 }} {{ n is equalto(7) }} {{ n is odd }} {{ n is even }} {{ 3 is lt 4 }} {{ 'a' is in 'abc' }} {{ none is sameas none }} {{ s is not none }} {{ s is lower }} {{ 'AB' is upper }}"),
    # filters
    ("filters_str", "{{ s | trim }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ s | length }}|{{ u | length }}|{{ s | replace('l', 'L') }}|{{ 'xxaxx' | trim('x') }}|{{ s | string }}"),
    ("filters_list", "{{ l | sort }} {{ l | sort(reverse=true) }} {{ ls | sort }} {{ ls | sort(case_sensitive=true) }} {{ l | first }} {{ l | last }} {{ l | reverse | list }} {{ l | sum }} {{ l | min }} {{ l | max }} {{ l | length }} {{ l | join(', ') }} {{ 'abc' | list }} {{ [1, 1, 2] | unique | list }}"),
    ("filters_dict", "{{ d | length }} {{ d | list }} {{ {'b': 1, 'a': 2} | dictsort }} {% for k, v in d | items %}{{ k }};{% endfor %}"),
    ("filters_default", "{{ q | default('dflt') }} {{ none | default('x') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ q | d('short') }}"),
    ("filters_numbers", "{{ '42' | int + 1 }} {{ 3.9 | int }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ n | string + 'x' }}"),
    ("filters_map_select", "{{ msgs | map(attribute='role') | join(',') }} {{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='content') | list }} {{ [0, 1, 2, none] | select | list }} {{ l | reject('odd') | list }} {{ ['a', 'code_interpreter'] | reject('equalto', 'code_interpreter') | join(', ') }} {{ [1, 2] | map('string') | list }}"),
    ("filters_indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}"),
    ("tojson_basic", "{{ d | tojson }} {{ l | tojson }} {{ s | tojson }} {{ none | tojson }} {{ b | tojson }} {{ big | tojson }} {{ fl | tojson }}"),
    ("tojson_escapes", "{{ 'q\"b\\\\ n\\n t\\t <>&\\' é \\x7f \\u2028 \\x01 \\x1f 😀' | tojson }}"),
    ("tojson_indent", "{{ d | tojson(indent=4) }}|{{ el | tojson(indent=2) }}|{{ {'a': {}} | tojson(indent=2) }}"),
    ("tojson_options", "{{ d | tojson(sort_keys=true) }} {{ u | tojson(ensure_ascii=true) }} {{ d.m | tojson(separators=(',', ':')) }}"),
    # methods
    ("str_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ s.startswith('  He') }}|{{ s.endswith(('x', '  ')) }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ 'a-b'.replace('-', '+') }}|{{ 'hello'.find('l') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.count('l') }}|{{ ', '.join(['a', 'b']) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '12'.isdigit() }}|{{ 'x'.isalpha() }}"),
    ("str_methods_think", "{% set c = '<think>\\nreason\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}"),
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list | length }} {{ d.get('z') }} {{ d.get('q', 'dflt') }} {{ d.get('q') }}"),
    ("list_methods", "{{ l.index(1) }} {{ l.count(3) }}"),
    ("globals", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b=2) }} {{ namespace(a=1).a }}"),
    ("str_format", "{{ '<{}|{}>'.format(n, s) }} {{ '{0}{1}{0}'.format('a', 1.0) }} {{ '{x}-{y!r}'.format(x=1, y='q') }} {{ '{{literal}}'.format() }}"),
    ("generators", "{% set g = el | map('string') %}{{ 'truthy' if g else 'falsy' }} {{ l | select('odd') | list }} {% set r = l | reverse %}{{ r | list }}{{ r | list }} {{ d.items() }} {{ d.keys() | length }} {{ (d.items() | list)[0] }} {{ 1 in l | map('int') }} {{ none | map('int') | list }} {{ none | selectattr('x') | list }}"),
    ("err_generator_len", "{{ l | map('string') | length }}"),
    ("err_generator_tojson", "{{ l | map('string') | tojson }}"),
    ("err_view_tojson", "{{ d.keys() | tojson }}"),
    ("err_format_missing", "{{ '{} {}'.format(1) }}"),
    ("dict_nonstring_keys", "{{ {0: 'a', 512: 'b'}[512] }} {{ {1: 'x'}[1.0] }} {{ {true: 1}[1] }} {{ {1: 2, 'a': 3} }} {{ {2: 'b', 1: 'a'} | dictsort }} {{ {1: 2, 2.5: 3, none: 4, false: 5} | tojson }} {{ 1 in {1: 2} }} {% for k in {3: 1} %}{{ k + 1 }}{% endfor %} {{ {1.5: 2} }} {{ {1: 1}.get(1) }} {% for k, v in {7: 8}.items() %}{{ k * v }}{% endfor %}"),
    ("err_unhashable_key", "{{ {[1]: 2} }}"),
    ("markup", "{{ '<b>'|safe + '<i>' }} {{ 'x<' + '<y>'|safe }} {{ \"'q' & \\\"d\\\"\"|safe + \"'q' & \\\"d\\\"\" }} {{ '<a>'|e }} {{ ('<a>'|e)|e }} {{ '<a>'|forceescape }} {{ '<'|safe ~ '>' }} {{ ('a'|safe) == 'a' }} {{ ('ab'|safe) | length }} {{ ('x'|safe) is string }} {{ ('<s>'|safe + '<t>') | tojson }} {{ q|safe }}|"),
    ("err_markup_plus_int", "{{ 'a'|safe + 1 }}"),
    ("undefined_filters", "[{{ q|first }}][{{ q|last }}]{{ q|sort }}[{{ q|capitalize }}][{{ q|replace('a', 'b') }}][{{ q|e }}][{{ q|safe }}]{{ q|sum }}{{ q|unique|list }}{{ q|map('x')|list }}{{ q|select|list }}[{{ q|title }}]{{ q|wordcount }}[{{ q|center(6) }}]{{ q|items|list }}{{ q|join(',') }}{{ q|length }}[{{ q|upper }}][{{ q|lower }}][{{ q|trim }}]{{ q|list }}[{{ q|string }}]{{ q|batch(2)|list }}"),
    ("err_undefined_int", "{{ q|int }}"),
    ("err_undefined_round", "{{ q|round }}"),
    ("err_undefined_dictsort", "{{ q|dictsort }}"),
    ("undefined_print", "[{{ q }}][{{ d.q }}][{{ l[9] }}]"),
    # errors
    ("err_raise", "{{ raise_exception('boom') }}"),
    ("err_undefined_attr", "{{ q.x }}"),
    ("err_undefined_add", "{{ q + 'x' }}"),
    ("err_str_plus_int", "{{ 'a' + 1 }}"),
    ("err_none_plus_str", "{{ none + 'a' }}"),
    ("err_macro_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    ("err_macro_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(b=2) }}"),
    ("err_order", "{{ 1 < 'a' }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_int_iter", "{% for x in 5 %}{% endfor %}"),
    ("err_call_undefined", "{{ nothere() }}"),
    ("err_unsafe_append", "{{ l.append(4) }}"),
    ("err_syntax", "{% if %}"),
    ("err_unclosed", "{% for x in l %}"),
    ("err_ns_underscore", "{% set ns = namespace(_x=1) %}"),
    ("err_len_int", "{{ 5 | length }}"),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for name, src in T:
        case = {"name": name, "template": src, "vars": V}
        try:
            case["want"] = _compile_jinja_template(src).render(**V)
        except Exception as e:  # noqa: BLE001 - the reference's failure is the golden
            case["error"] = type(e).__name__
        out.append(case)
    with open(os.path.join(here, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(len(out), "cases")


if __name__ == "__main__":
    main()
