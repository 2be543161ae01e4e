#!/usr/bin/env python3
"""pass_options.py - every pass option is the same as a CLI flag and as a
recipe key (tests/cli/pass_options.sh).

Reads every pass's option table from the binary (`npuc help --options
--json`), then for each option runs probe values - at and just beyond its
bounds for numbers, a valid and an invalid value for flags, strings, lists
and REGEX=VALUE rules - both as `npuc <pass> MODEL --<flag> VALUE` and as a
one-step recipe `{<key>: VALUE}` through `npuc run`, and checks that both
accept (exit 0) or both reject (exit 2).  A value beyond a bound must be
rejected.

    pass_options.py NPUC_BIN MODEL WORKDIR
"""
import json
import math
import os
import subprocess
import sys

# Valid sample values for options that have neither choices nor a default:
# the table cannot say what a good regex or file is for this model.  A new
# option without one here fails the test until it gets one.
SAMPLES = {
    "include": "weight",
    "exclude": "classifier",
    "pattern": "1:2",
    "next": "features.0.weight=features.3.weight",
    "graph": "graph.txt",
    "pair": "features.0.weight=features.1",
    "pairs": "pairs.txt",
    "calib": "calib.safetensors",
    "export_encodings": "encodings.json",
    "activation_encodings": "calib.json",
    "target_size": "1M",
    "candidates": "int4/g32,int8/ch",
    "plan_out": "plan.json",
    "plan": "plan.json",
    "budget_cache": "cache.json",
}
FILES = {"graph.txt": "features.0.weight=features.3.weight\n", "pairs.txt": "features.0.weight=features.1\n",
         "calib.json": '{"schema": "npuc.calibration/1", "bits": 8, "symmetric": true, "activations": '
                       '{"x": {"axis": null, "channels": [{"scale": 0.5, "zero_point": 0}]}}}\n'}
BAD_STRING = "zz(nonsense"


def calib_file():
    """A calibration file (docs/calibration.md) with the input_sq of
    features.0.weight of the cnn_bn sample (27 input columns), all ones."""
    import struct
    h = json.dumps({"features.0.weight.input_sq": {"dtype": "F32", "shape": [27], "data_offsets": [0, 108]}}).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + struct.pack("<27f", *([1.0] * 27))


def fmt_num(v, integer):
    if integer:
        return str(v)
    r = repr(float(v))
    return r


def probes(o):
    """(cli text or None for a bare flag, yaml text, must_reject, what) tuples."""
    t = o["type"]
    out = []
    if t == "bool":
        out.append((None, "true", False, "flag"))
        out.append(("=yes", "'yes'", True, "a value for a flag"))
        return out
    if t in ("int", "number"):
        integer = t == "int"
        lo, hi = o["lo"], o["hi"]
        lo = float(lo) if not isinstance(lo, str) else float(lo)
        hi = float(hi) if not isinstance(hi, str) else float(hi)
        for bound, is_lo in ((lo, True), (hi, False)):
            if math.isinf(bound):
                inside = 1e300 if bound > 0 else -1e300
                out.append((fmt_num(inside, False), fmt_num(inside, False), False, "huge"))
                continue
            is_open = o["lo_open" if is_lo else "hi_open"]
            if integer:
                bound = int(bound)  # exact: 2^53 + 1 is not a float
            step = 1 if integer else max(abs(bound) * 1e-6, 1e-6)
            beyond = bound - step if is_lo else bound + step
            inside = bound + step if is_lo else bound - step
            out.append((fmt_num(bound, integer), fmt_num(bound, integer), is_open, "at %s" % ("lo" if is_lo else "hi")))
            out.append((fmt_num(beyond, integer), fmt_num(beyond, integer), True, "beyond %s" % ("lo" if is_lo else "hi")))
            if is_open:
                out.append((fmt_num(inside, integer), fmt_num(inside, integer), False, "inside"))
        out.append(("abc", "abc", True, "not a number"))
        return out
    if t == "string":
        if o.get("choices"):
            for c in o["choices"]:
                out.append((c, "'%s'" % c, False, "choice"))
        else:
            v = o["default"] if o["default"] is not None else SAMPLES[o["key"]]
            out.append((v, "'%s'" % v, False, "valid"))
        if not o["path"]:
            out.append((BAD_STRING, "'%s'" % BAD_STRING, True, "invalid"))
        return out
    if t == "list":
        v = SAMPLES[o["key"]]
        out.append((v, "['%s']" % v, False, "valid"))
        out.append(((BAD_STRING, "['%s']" % BAD_STRING, True, "invalid")))
        return out
    if t == "rules":
        integer = o["value_type"] == "int"
        lo, hi = (int(o["lo"]), int(o["hi"])) if integer else (float(o["lo"]), float(o["hi"]))
        vals = [(lo, o["lo_open"], "at lo"), (hi, o["hi_open"], "at hi")]
        step = 1 if integer else 1e-6
        vals.append((lo - step, True, "beyond lo"))
        vals.append((hi + step, True, "beyond hi"))
        for v, rej, what in vals:
            r = "weight=" + fmt_num(v, integer)
            out.append((r, "['%s']" % r, rej, "rule " + what))
        out.append(("weight", "['weight']", True, "rule without value"))
        return out
    raise SystemExit("unknown option type %r" % t)


def run(cmd, cwd):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stderr.strip().splitlines()[:1]


def kv(spec):
    k, v = spec.split("=", 1)
    return k, v


QUICK = os.environ.get("NPUC_TEST_QUICK") == "1"


def main():
    seen = 0
    npuc, model, work = sys.argv[1:4]
    for name, text in FILES.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    with open(os.path.join(work, "calib.safetensors"), "wb") as f:
        f.write(calib_file())
    table = json.loads(subprocess.run([npuc, "help", "--options", "--json"], check=True, stdout=subprocess.PIPE,
                                      text=True).stdout)
    assert table["schema"] == "npuc.pass_options/1"
    bad, checked = [], 0
    for p in table["passes"]:
        opts = {o["key"]: o for o in p["options"]}
        for o in p["options"]:
            # Context: the pass's required options (unless o is one of them or
            # in the same exclusive group) and what o needs.
            ctx = []
            for b in p["base"]:
                k, v = kv(b)
                if k == o["key"] or (o["group"] and opts[k]["group"] == o["group"]):
                    continue
                ctx.append((k, v))
            if o["needs"]:
                ctx.append(kv(o["needs"]))
            for cli_val, yaml_val, must_reject, what in probes(o):
                # The quick passes (sanitizers: NPUC_TEST_QUICK=1) try every sixth
                # probe (rotating over the options); the release pass tries them all.
                seen += 1
                if QUICK and seen % 6:
                    continue
                out = os.path.join(work, "out.safetensors")
                cli = [npuc, p["name"], model, "-o", out, "-f", "-q", "-j", "1"]
                for k, v in ctx:
                    cli += ["--" + opts[k]["flag"], v]
                if cli_val is None:
                    cli.append("--" + o["flag"])
                elif cli_val.startswith("="):
                    cli.append("--" + o["flag"] + cli_val)
                else:
                    cli += ["--" + o["flag"], cli_val]
                recipe = os.path.join(work, "r.yaml")
                with open(recipe, "w") as f:
                    f.write("steps:\n  - %s:\n" % p["name"])
                    for k, v in ctx:
                        f.write("      %s: %s\n" % (k, v))
                    f.write("      %s: %s\n" % (o["key"], yaml_val))
                rc_cli, err_cli = run(cli, work)
                rc_rec, err_rec = run([npuc, "run", recipe, model, "-o", out, "-f", "-q", "-j", "1"], work)
                checked += 1
                label = "%s %s (%s) %s: CLI %r, recipe %r" % (p["name"], o["key"], what, cli_val if cli_val else
                                                              "flag", rc_cli, rc_rec)
                ok = (rc_cli == 0) == (rc_rec == 0) and rc_cli in (0, 2) and rc_rec in (0, 2)
                if must_reject and (rc_cli != 2 or rc_rec != 2):
                    ok = False
                if not ok:
                    bad.append(label + "\n    cli: %s\n    recipe: %s" % (err_cli, err_rec))
                elif os.environ.get("VERBOSE"):
                    print("ok  " + label)
    for b in bad:
        print("MISMATCH " + b)
    print("%d probes over %d passes, %d mismatches" % (checked, len(table["passes"]), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
