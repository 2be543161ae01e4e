// ort_run.js - runs an ONNX model in onnxruntime for Node and writes its
// outputs as JSON (tests/cli/onnx_lowrank.sh).
//   node ort_run.js MODEL FEEDS.json OUT.json
// FEEDS.json as onnx_check.py feeds writes it; OUT.json: {name: {dims, data}}.
// Graph optimisation 'basic'.
const ort = require('onnxruntime-node');
const fs = require('fs');

(async () => {
  const [model, feedsPath, outPath] = process.argv.slice(2);
  const spec = JSON.parse(fs.readFileSync(feedsPath, 'utf8'));
  const feeds = {};
  for (const [name, f] of Object.entries(spec))
    feeds[name] = f.type === 'bool' ? new ort.Tensor('bool', Uint8Array.from(f.data), f.dims)
                : f.type === 'int64' ? new ort.Tensor('int64', BigInt64Array.from(f.data, BigInt), f.dims)
                : new ort.Tensor('float32', Float32Array.from(f.data), f.dims);
  const s = await ort.InferenceSession.create(model, {graphOptimizationLevel: 'basic', logSeverityLevel: 3});
  const out = await s.run(feeds);
  const res = {};
  for (const n of s.outputNames) res[n] = {dims: out[n].dims, data: Array.from(out[n].data, Number)};
  fs.writeFileSync(outPath, JSON.stringify(res));
})().catch((e) => { console.error(e.message); process.exit(1); });
