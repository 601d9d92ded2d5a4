#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_config_docs.py - every configuration key kvarenad reads
(daemon/kvarenad/config.c: its [section] key parsers) is documented where
the operator looks: the annotated example packaging/kvarenad.conf (in its
section, as "# key = value" or "key = value"), the configuration table of
Documentation/daemon.md (a row of its section naming it) and kvarenad(8)'s
CONFIGURATION section; and where the example gives a plain number or
yes/no for a key whose default kvd_config_defaults() sets, the two agree.
Every key is also either applied by a reload (RELOADED below, as
Documentation/daemon.md's SIGHUP says) or in config.c's table of the
settings read at start only, so that a reload changing it is reported.

The [tenant.NAME] and [mcp.NAME] keys are parsed by their own functions
and documented in their own places; they are not walked here.

usage: check_config_docs.py   (from the repository root; exit 1 on a gap)
"""
import re
import sys

SRC = open("daemon/kvarenad/config.c").read()


def config_keys():
    """(section, key, field or None) for every [section] key config.c reads."""
    keys = {}
    for m in re.finditer(r'(U32|BOOL|STR)\("(\w+)", "(\w+)", (\w+)', SRC):
        keys[(m.group(2), m.group(3))] = (m.group(1), m.group(4))
    for m in re.finditer(r'!strcmp\(sec, "(\w+)"\) &&\s*\(?!strcmp\(k, "(\w+)"\)'
                         r'(?:\s*\|\|\s*!strcmp\(k, "(\w+)"\))?', SRC):
        for k in (m.group(2), m.group(3)):
            if k:
                keys.setdefault((m.group(1), k), (None, None))
    return keys


# what SIGHUP applies (main.c, kvd_tiering_reload); every other key must
# be in config.c's start_only table
RELOADED = {("kv", "policy"), ("kv", "low_watermark"), ("kv", "high_watermark"),
            ("kv", "ttl_ms"), ("tier", "decisions"), ("tier", "prefetch"),
            ("tier", "prefetch_margin_ms"), ("tier", "prefetch_slack"), ("log", "level"), ("server", "metrics_key"),
            ("server", "metrics_key_file"), ("server", "metrics_key_credential")}


def start_only():
    return {(m.group(1), m.group(2))
            for m in re.finditer(r'SOS?\("\[(\w+)\] (\w+)"', SRC)}


def defaults():
    body = SRC[SRC.index("void kvd_config_defaults"):]
    body = body[:body.index("\n}\n")]
    out = {}
    for m in re.finditer(r"c->(\w+) = ([0-9.]+);", body):
        out[m.group(1)] = m.group(2)
    return out


def conf_blocks():
    """Lines of each section; a section whose header is commented out is an
    example (its values are not defaults): its lines are marked."""
    blocks, cur, example = {}, None, False
    for line in open("packaging/kvarenad.conf"):
        m = re.match(r"^(#?)\s*\[([\w.-]+)\]", line)
        if m:
            cur = blocks.setdefault(m.group(2), [])
            example = m.group(1) == "#"
            continue
        if cur is not None and example:
            line = "@" + line       # not a default
        if cur is not None:
            cur.append(line.rstrip("\n"))
    return blocks


def main():
    keys, dflt, blocks = config_keys(), defaults(), conf_blocks()
    md = open("Documentation/daemon.md").read().splitlines()
    man = open("Documentation/man/kvarenad.8").read()
    man = re.sub(r"\\f[BIRP]|\\-|\\&", "", man[man.index(".SH CONFIGURATION"):])
    gaps = 0
    for (sec, k), (kind, field) in sorted(keys.items()):
        where = []
        line = next((l for l in blocks.get(sec, []) if re.match(r"^@?#?\s*%s\s*=" % k, l)), None)
        if line is None:
            where.append("packaging/kvarenad.conf")
        if not any(re.search(r"\b%s\b" % k, row.split("|")[2])
                   for row in md if row.startswith("| %s |" % sec)):
            where.append("Documentation/daemon.md's table")
        if not re.search(r"(?<![\w-])%s(?![\w-])" % k, man):
            where.append("kvarenad(8)")
        if where:
            gaps += 1
            print(f"[{sec}] {k}: not in " + ", ".join(where))
        if line is None or line.startswith("@") or kind not in ("U32", "BOOL"):
            continue
        val = line.split("=", 1)[1].split(";", 1)[0].strip()
        want = dflt.get(field, "0")
        if kind == "BOOL" and val in ("yes", "no"):
            val = "1" if val == "yes" else "0"
        if re.fullmatch(r"[0-9.]+", val) and float(val) != float(want):
            gaps += 1
            print(f"[{sec}] {k}: packaging/kvarenad.conf says {val}, the default is {want}")
    so = start_only()
    for sec, k in sorted(set(keys) - so - RELOADED):
        gaps += 1
        print(f"[{sec}] {k}: neither applied by a reload nor in config.c's start_only table")
    for sec, k in sorted(so & RELOADED):
        gaps += 1
        print(f"[{sec}] {k}: applied by a reload and in config.c's start_only table")
    print(f"check_config_docs: {len(keys)} keys, {gaps} gap(s)")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
