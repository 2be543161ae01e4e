// ort_task.js - what an OCR model's output means, original against compressed,
// in onnxruntime for Node on the same inputs (tests/cli/onnx_real.sh):
//   node ort_task.js ORIG OUT FEEDS.json det MIN_IOU
//     text detection: the IoU of the two text masks (probability > 0.3, the
//     threshold PaddleOCR's DB post-processing uses);
//   node ort_task.js ORIG OUT FEEDS.json rec MIN_AGREE
//     text recognition: the fraction of time steps whose most likely
//     character is the same.
// Prints the figure; exits 1 below the bound.  Graph optimisation 'basic'.
const ort = require('onnxruntime-node');

async function run(path, feeds) {
  const s = await ort.InferenceSession.create(path, {graphOptimizationLevel: 'basic', logSeverityLevel: 3});
  const out = await s.run(feeds);
  return out[s.outputNames[0]];
}

(async () => {
  const [orig, out, feedsPath, kind, min] = process.argv.slice(2);
  const spec = JSON.parse(require('fs').readFileSync(feedsPath, 'utf8'));
  const feeds = {};
  for (const [name, f] of Object.entries(spec)) feeds[name] = new ort.Tensor('float32', Float32Array.from(f.data), f.dims);
  const a = await run(orig, feeds), b = await run(out, feeds);
  let fig, what;
  if (kind === 'det') {
    let inter = 0, union = 0;
    a.data.forEach((v, k) => {
      const p = v > 0.3, q = b.data[k] > 0.3;
      inter += p && q;
      union += p || q;
    });
    fig = union ? inter / union : 1;
    what = `text-mask IoU ${fig.toFixed(4)} (${union} pixels in either mask)`;
  } else {
    const C = a.dims[a.dims.length - 1], steps = a.data.length / C;
    let same = 0;
    for (let t = 0; t < steps; t++) {
      let ai = 0, bi = 0;
      for (let c = 1; c < C; c++) {
        if (a.data[t * C + c] > a.data[t * C + ai]) ai = c;
        if (b.data[t * C + c] > b.data[t * C + bi]) bi = c;
      }
      same += ai === bi;
    }
    fig = same / steps;
    what = `same most likely character at ${same} of ${steps} time steps`;
  }
  console.log(`${out}: ${what} (min ${min})`);
  if (!(fig >= Number(min))) process.exit(1);
})().catch((e) => { console.error(e.message); process.exit(1); });
