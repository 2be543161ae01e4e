#!/usr/bin/env bash
# The HTML report in a real browser (issue 7): headless Chromium loads the file
# (file://, no network) and the rendered DOM must hold the sortable table (one
# row per tensor), the SQNR and bytes charts with one bar row per changed
# tensor, and the worst-K histograms; the inline script must have run (it
# marks the headers sortable) and a click on the SQNR header must put the
# worst tensor first.  On ../shared/data/ppocrv4_rec (when present) a 4-bit
# report is rendered and a screenshot kept at $NPUC_BUILD/report_ppocrv4_rec_q4.png
# for people to look at.  Skips when Chromium is absent (.ci/install-deps --test
# installs Debian's chromium).
source "$(dirname "$0")/lib/cli_test.bash"

CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || skip "chromium is not installed (.ci/install-deps --test)"

chrome() { # chrome ARGS... URL: headless, no network, a fresh profile
    local prof
    prof=$(mktemp -d "$T/prof.XXXXXX")
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$prof" "$@" 2>"$T/chrome.err"
}

check_dom() { # check_DOM DOM_FILE TENSORS CHANGED HISTS FIRST_AFTER_SORT(optional)
    "$PY" - "$@" <<'PY'
import re, sys
dom, n, changed, hists = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def section(tag_id, tag):
    m = re.search(r'<%s[^>]*id="%s".*?</%s>' % (tag, tag_id, tag), dom, re.S)
    assert m, f"no <{tag} id={tag_id}> in the rendered DOM"
    return m.group(0)
table = section("tensors", "table")
body = re.search(r"<tbody>(.*)</tbody>", table, re.S).group(1)
rows = re.findall(r"<tr[ >]", body)
assert len(rows) == n, f"{len(rows)} table rows, want {n}"
assert 'class="n sort' in table or 'class="sort' in table, "the inline script did not run (headers not sortable)"
sq = section("chart-sqnr", "svg")
assert len(re.findall(r'<g class="row">', sq)) == changed, "SQNR bars"
assert len(re.findall(r"<rect ", sq)) >= changed
by = section("chart-bytes", "svg")
assert len(re.findall(r'<g class="row">', by)) == changed, "bytes bars"
assert len(re.findall(r'<svg class="hist"', dom)) == hists, "histograms"
assert "<polyline" in dom
if len(sys.argv) > 5:
    first = re.search(r'<td class="mono">([^<]*)</td>', body).group(1)
    assert first == sys.argv[5], f"after sorting by SQNR the first row is {first}, want {sys.argv[5]}"
print(f"DOM ok: {n} rows, {changed} bars per chart, {hists} histograms")
PY
}

cnn="$SAMPLES/cnn_bn.safetensors"
"$NPUC_BIN" quantize -q --bits 4 "$cnn" -o "$T/q4.safetensors" >/dev/null
expect_rc 0 "$NPUC_BIN" report -q "$cnn" "$T/q4.safetensors" --worst 3 -o "$T/r.html"
chrome --dump-dom "file://$T/r.html" >"$T/dom.html" || { cat "$T/chrome.err" >&2; fail "chromium failed on r.html"; }
check_dom "$T/dom.html" 21 4 3 || fail "rendered DOM of the cnn_bn report"

# Sorting: click the SQNR header once (ascending) from a copy with one more script line.
sed 's|</body>|<script>Array.prototype.find.call(document.querySelectorAll("#tensors th"),function(h){return h.textContent.indexOf("SQNR")===0;}).click();</script></body>|' \
    "$T/r.html" >"$T/sorted.html"
chrome --dump-dom "file://$T/sorted.html" >"$T/dom2.html" || fail "chromium failed on sorted.html"
check_dom "$T/dom2.html" 21 4 3 features.3.weight || fail "sorting the table by SQNR"

# The shared real model at 4 bits: the report a reviewer would open.
pp="$SHARED/ppocrv4_rec.safetensors"
if [ -f "$pp" ]; then
    "$NPUC_BIN" quantize -q --bits 4 "$pp" -o "$T/pp4.safetensors" >/dev/null
    expect_rc 0 "$NPUC_BIN" report -q "$pp" "$T/pp4.safetensors" -o "$T/pp4.html"
    chrome --dump-dom "file://$T/pp4.html" >"$T/dom3.html" || fail "chromium failed on pp4.html"
    check_dom "$T/dom3.html" 122 47 10 || fail "rendered DOM of the ppocrv4_rec report"
    shot="${NPUC_BUILD:-$T}/report_ppocrv4_rec_q4.png"
    chrome --screenshot="$shot" --window-size=1400,2000 "file://$T/pp4.html" >/dev/null || fail "screenshot"
    [ "$(stat -c %s "$shot")" -gt 50000 ] || fail "the screenshot $shot is suspiciously small"
    echo "screenshot: $shot"
else
    echo "no $pp: skipping the real-model report"
fi
echo "html ok"
