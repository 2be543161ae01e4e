// ort_compare.js - runs two ONNX models in onnxruntime for Node on the same
// inputs and compares their outputs (tests/cli/onnx.sh).
//   node ort_compare.js ORIG OUT FEEDS.json MAXREL
// FEEDS.json (written by onnx_check.py feeds): {name: {type, dims, data}}.
// For every output: rel = ||out - orig|| / ||orig||; exits 1 when any rel
// exceeds MAXREL or an output is not finite.  Graph optimisation 'basic'.
const ort = require('onnxruntime-node');

async function run(path, feeds) {
  const s = await ort.InferenceSession.create(path, {graphOptimizationLevel: 'basic', logSeverityLevel: 3});
  const out = await s.run(feeds);
  return s.outputNames.map((n) => Array.from(out[n].data, Number));
}

(async () => {
  const [orig, out, feedsPath, maxRel] = process.argv.slice(2);
  const spec = JSON.parse(require('fs').readFileSync(feedsPath, 'utf8'));
  const feeds = {};
  for (const [name, f] of Object.entries(spec))
    feeds[name] = f.type === 'bool' ? new ort.Tensor('bool', Uint8Array.from(f.data), f.dims)
                : f.type === 'int64' ? new ort.Tensor('int64', BigInt64Array.from(f.data, BigInt), f.dims)
                : new ort.Tensor('float32', Float32Array.from(f.data), f.dims);
  const a = await run(orig, feeds), b = await run(out, feeds);
  let worst = 0;
  const each = [];
  a.forEach((x, k) => {
    let num = 0, den = 0;
    x.forEach((v, i) => {
      if (!Number.isFinite(b[k][i])) throw new Error(`${out}: output ${k} is not finite`);
      num += (b[k][i] - v) ** 2;
      den += v * v;
    });
    const rel = den ? Math.sqrt(num / den) : Math.sqrt(num);
    each.push(rel.toExponential(2));
    worst = Math.max(worst, rel);
  });
  console.log(`${out}: relative output error ${worst.toExponential(3)} (max ${maxRel}; per output ${each.join(', ')})`);
  if (!(worst <= Number(maxRel))) process.exit(1);
})().catch((e) => { console.error(e.message); process.exit(1); });
