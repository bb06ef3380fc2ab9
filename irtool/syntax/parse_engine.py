"""A small, fast LALR(1) driver over the parse table Lark computes from a `grammar/*.lark` file.

Lark's own parser builds trees and goes through several layers per token; irtool's text formats
must parse well above 30k lines/s, so this module takes only Lark's table (computed once, then
cached as JSON) and runs the shift/reduce loop itself. Each grammar rule gets an action chosen
by its alias (`-> name`) or rule name; the action receives the rule's value-carrying children
(keywords and punctuation dropped, `None` for an absent `[optional]` part) and the rule's
source range, and returns the semantic value (an IR node, a list, ...). Single-child `?rules`
without alias pass their child through at almost no cost.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

# A token: (terminal name, text, start offset, end offset). Offsets index the source text.
Token = tuple[str, str, int, int]

END = "$END"
_FORMAT = 1  # bump when the cached JSON layout changes


@dataclass(frozen=True)
class RuleInfo:
    """What the driver needs to know about one grammar rule."""

    origin: str          # the nonterminal it produces
    name: str            # the action name: alias, else origin
    size: int            # number of symbols on the right-hand side
    template: tuple[int, ...] | None  # child indices to keep, -1 = None placeholder; None = all
    passthrough: bool    # a `?rule` alternative with one kept child and no alias


@dataclass
class Table:
    """An LALR(1) table: per state, terminal or nonterminal name -> action code.

    Code >= 0: shift (terminal) or goto (nonterminal) to that state. Code < 0: reduce by rule
    number ~code.
    """

    states: list[dict[str, int]]
    rules: list[RuleInfo]
    start_states: dict[str, int]
    end_states: dict[str, int]
    terminals: dict[str, str]   # terminal name -> literal text for string terminals, else pattern
    literals: dict[str, str]    # literal text -> terminal name (keywords and punctuation)


def _compile(grammar_text: str, starts: list[str]) -> Table:
    from lark.common import ParserConf
    from lark.grammar import Terminal
    from lark.lexer import PatternStr
    from lark.load_grammar import load_grammar
    from lark.parsers.lalr_analysis import LALR_Analyzer, Reduce

    grammar, _ = load_grammar(grammar_text, "<grammar>", [], False)
    terminals, rules, _ = grammar.compile(starts, ())
    analysis = LALR_Analyzer(ParserConf(rules, {}, starts), strict=True)
    analysis.compute_lalr()
    table = analysis.parse_table

    rule_index: dict[Any, int] = {}
    infos: list[RuleInfo] = []
    for rule in rules:
        rule_index[rule] = len(infos)
        expansion = rule.expansion
        kept = [i for i, sym in enumerate(expansion)
                if not (isinstance(sym, Terminal) and sym.filter_out)]
        empty = rule.options.empty_indices
        template: list[int] = []
        if empty:
            # `empty_indices` marks, in order, each symbol (False) and each absent optional (True).
            sym_i = 0
            for is_empty in empty:
                if is_empty:
                    template.append(-1)
                else:
                    if sym_i in kept:
                        template.append(sym_i)
                    sym_i += 1
        else:
            template = kept
        passthrough = bool(rule.options.expand1) and rule.alias is None and len(template) == 1 \
            and template[0] >= 0
        infos.append(RuleInfo(
            origin=str(rule.origin.name),
            name=str(rule.alias or rule.origin.name),
            size=len(expansion),
            template=None if template == list(range(len(expansion))) else tuple(template),
            passthrough=passthrough,
        ))

    states: list[dict[str, int]] = [{} for _ in table.states]
    for state, actions in table.states.items():
        row = states[state]
        for symbol, (action, arg) in actions.items():
            row[symbol] = ~rule_index[arg] if action is Reduce else arg
    term_text = {t.name: (t.pattern.value if isinstance(t.pattern, PatternStr) else t.pattern.to_regexp())
                 for t in terminals}
    literals = {t.pattern.value: t.name for t in terminals if isinstance(t.pattern, PatternStr)}
    return Table(states, infos, dict(table.start_states), dict(table.end_states), term_text, literals)


def _to_json(table: Table) -> str:
    return json.dumps({
        "format": _FORMAT,
        "states": table.states,
        "rules": [[r.origin, r.name, r.size, None if r.template is None else list(r.template), r.passthrough]
                  for r in table.rules],
        "start_states": table.start_states,
        "end_states": table.end_states,
        "terminals": table.terminals,
        "literals": table.literals,
    })


def _from_json(text: str) -> Table:
    data = json.loads(text)
    if data.get("format") != _FORMAT:
        raise ValueError("stale cache format")
    rules = [RuleInfo(o, n, s, None if t is None else tuple(t), p) for o, n, s, t, p in data["rules"]]
    states = [{k: int(v) for k, v in row.items()} for row in data["states"]]
    return Table(states, rules, data["start_states"], data["end_states"], data["terminals"], data["literals"])


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isdir(os.path.dirname(base)) and not os.path.isdir(base):
        base = tempfile.gettempdir()
    return Path(base) / "irtool"


def load_table(grammar_text: str, starts: list[str]) -> Table:
    """The LALR table of a grammar, from the on-disk cache when the grammar is unchanged.

    The cache is plain JSON (never pickle), keyed by a hash of the grammar, start symbols and
    Lark version; any problem reading or writing it falls back to computing the table.
    """
    import lark

    key = hashlib.sha256("\0".join([grammar_text, *starts, lark.__version__, str(_FORMAT)])
                         .encode()).hexdigest()[:24]
    path = _cache_dir() / f"grammar-{key}.json"
    try:
        return _from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    table = _compile(grammar_text, starts)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".grammar-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_to_json(table))
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return table


class SyntaxErrorAt(Exception):
    """The driver met a token no rule allows; the caller turns this into a located diagnostic."""

    def __init__(self, token: Token, expected: list[str]) -> None:
        super().__init__(token[1])
        self.token = token
        self.expected = expected


def bind_actions(table: Table, actions: object) -> list[tuple[str, int, Any, Any]]:
    """Per rule: (origin, size, template, action or None for pass-through).

    `actions` is an object whose methods are named after rule aliases or rule names; a rule
    without one is a grammar/actions mismatch, reported at once.
    """
    bound: list[tuple[str, int, Any, Any]] = []
    for rule in table.rules:
        if rule.passthrough:
            bound.append((rule.origin, rule.size, rule.template, None))
            continue
        fn = getattr(actions, rule.name, None)
        if fn is None:
            raise LookupError(f"no action for grammar rule {rule.name!r}")
        bound.append((rule.origin, rule.size, rule.template, fn))
    return bound


def run(table: Table, bound: list[tuple[str, int, Any, Any]], start: str,
        chunks: Iterable[list[Token]], text_length: int) -> Any:
    """Parse a token stream (given as lists of tokens); return the value of the start symbol.

    The loop is written for speed: three parallel stacks (states, values, start offsets), one
    dict lookup per action, and no per-token objects beyond the tokens themselves. Chains of
    pass-through reductions (`expr -> stmt -> binop -> ... -> primary`) are collapsed into one
    step through a cache keyed by (state below, state, lookahead). The end of input is one more
    token, `$END`, after which the start symbol's final state accepts.
    """
    rows = table.states
    accept = table.end_states[start]
    state = table.start_states[start]
    state_stack = [state]
    values: list[Any] = []
    starts: list[int] = []
    last_end = 0
    unit_cache: dict[tuple[int, int, str], int] = {}
    pickers = [_picker(template) for _, _, template, _ in bound]
    end_token: Token = (END, "", text_length, text_length)
    for chunk in _with_end(chunks, end_token):
        for token in chunk:
            ttype = token[0]
            while True:
                code = rows[state].get(ttype)
                if code is None:
                    if ttype == END and state == accept and len(values) == 1:
                        return values[0]
                    raise SyntaxErrorAt(token, _expected(rows[state], table))
                if code >= 0:
                    state = code
                    state_stack.append(code)
                    values.append(token)
                    starts.append(token[2])
                    last_end = token[3]
                    break
                origin, size, template, action = bound[~code]
                if action is None:
                    if size == 1:
                        below = state_stack[-2]
                        key = (below, state, ttype)
                        target = unit_cache.get(key)
                        if target is None:
                            target = unit_cache[key] = _unit_chain(rows, bound, below, origin, ttype)
                        state = state_stack[-1] = target
                        continue
                    value = values[len(values) - size + template[0]]
                    begin = starts[-size]
                    del values[-size:], state_stack[-size:], starts[-size:]
                elif size:
                    begin = starts[-size]
                    pick = pickers[~code]
                    children = values[-size:] if pick is None else pick(values[-size:])
                    del values[-size:], state_stack[-size:], starts[-size:]
                    value = action(children, begin, last_end)
                else:
                    begin = token[2]
                    value = action([None] * len(template) if template else [], begin, begin)
                state = rows[state_stack[-1]][origin]
                state_stack.append(state)
                values.append(value)
                starts.append(begin)
    raise AssertionError("unreachable: $END is always rejected or accepted")


def _picker(template: tuple[int, ...] | None) -> Callable[[list[Any]], Any] | None:
    """Selects a rule's value-carrying children from its symbols (None: keep all)."""
    if template is None:
        return None
    if len(template) > 1 and min(template) >= 0:
        return itemgetter(*template)
    return lambda children: [children[i] if i >= 0 else None for i in template]


def _unit_chain(rows: list[dict[str, int]], bound: list[tuple[str, int, Any, Any]], below: int, origin: str,
                lookahead: str) -> int:
    """The state reached by reducing a single symbol over `below` to `origin`, then following any
    further single-symbol pass-through reductions the lookahead calls for."""
    while True:
        state = rows[below][origin]
        code = rows[state].get(lookahead)
        if code is None or code >= 0:
            return state
        origin, size, _, action = bound[~code]
        if action is not None or size != 1:
            return state


def _with_end(chunks: Iterable[list[Token]], end_token: Token) -> Iterator[list[Token]]:
    yield from chunks
    yield [end_token]


def _expected(row: dict[str, int], table: Table) -> list[str]:
    return sorted(sym for sym in row if sym in table.terminals or sym == END)
