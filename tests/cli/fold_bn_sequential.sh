#!/usr/bin/env bash
# Issue 31 item 5: a top-level nn.Sequential saved as torch.save writes its
# state dict (0.weight, 1.weight, 1.running_mean, ...) folds its BatchNorms
# by default: the Sequential rule A.(N-1) -> A.N holds with A empty.  The
# model is built and run with torch (independent of npuc): the folded file,
# loaded into the same Sequential without its BatchNorms, gives the same
# outputs as the original in eval mode.
source "$(dirname "$0")/lib/cli_test.bash"
"$PY" -c "import torch, numpy" 2>/dev/null || skip "python3-torch is not installed (.ci/install-deps --test installs it)"

"$PY" - "$T" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import torch
from io_models import write
torch.manual_seed(0)
seq = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                          torch.nn.Conv2d(8, 6, 3, bias=False), torch.nn.BatchNorm2d(6),
                          torch.nn.Flatten(), torch.nn.Linear(6 * 4 * 4, 5), torch.nn.BatchNorm1d(5))
for m in seq:
    if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)):
        m.running_mean.uniform_(-1, 1); m.running_var.uniform_(0.5, 2)
        m.weight.data.uniform_(0.5, 1.5); m.bias.data.uniform_(-1, 1)
sd = seq.state_dict()
write(sys.argv[1] + "/seq.safetensors", [(k, v.numpy()) for k, v in sd.items() if v.dtype.is_floating_point])
torch.save(seq, sys.argv[1] + "/seq.pt")
EOF_PY

expect_rc 0 "$NPUC_BIN" fold-bn "$T/seq.safetensors" -o "$T/folded.safetensors"
must_match "$T/out" "folded 3 of 3 BatchNorms; 0 skipped"
must_match "$T/out" "0\\.weight +1 +name"
must_match "$T/out" "3\\.weight +4 +name"
must_match "$T/out" "6\\.weight +7 +name"
# --strict accepts it: a pairing by names, not a guess.
expect_rc 0 "$NPUC_BIN" fold-bn "$T/seq.safetensors" -o "$T/folded2.safetensors" --strict -q

"$PY" - "$T" "$TESTLIB" <<'EOF_PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np, torch
from npuc_test import read_st
seq = torch.load(sys.argv[1] + "/seq.pt").eval()
got = {n: np.frombuffer(b, "<f4").reshape(s) for n, dt, s, b in read_st(sys.argv[1] + "/folded.safetensors")[1]}
assert sorted(got) == ["0.bias", "0.weight", "3.bias", "3.weight", "6.bias", "6.weight"], sorted(got)
plain = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Identity(), torch.nn.ReLU(),
                            torch.nn.Conv2d(8, 6, 3), torch.nn.Identity(), torch.nn.Flatten(),
                            torch.nn.Linear(6 * 4 * 4, 5)).eval()
plain.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in got.items()})
x = torch.randn(4, 3, 8, 8)
with torch.no_grad():
    a, b = seq(x), plain(x)
err = (a - b).abs().max().item() / a.abs().max().item()
assert err < 1e-5, err
print(f"folded top-level Sequential: outputs agree with torch (max rel {err:.2e})")
EOF_PY
