// A pyweft remote worker in JavaScript: the activities of `pyweft conformance`, served
// from the task stream given by the environment.
//
//   PYWEFT_WORKER_URL=ws://127.0.0.1:8000/api/v1/tasks/default/stream \
//   PYWEFT_WORKER_TOKEN=pwk_... node --experimental-websocket worker.mjs
//
//   pyweft conformance -- node --experimental-websocket examples/node-worker/worker.mjs

import { PyweftWorker, sleep } from "./pyweft-worker.mjs";

const activities = {
  // Returns its argument unchanged.
  "conformance.echo": async ([value]) => value,
  // Waits `ms` milliseconds (or until the attempt is cancelled), then returns `ms`.
  "conformance.sleep": async ([ms], { signal }) => { await sleep(ms, signal); return ms; },
  // Fails with the given message, as an error the retry policy must not retry.
  "conformance.fail": async ([message]) => {
    const err = new Error(message);
    err.name = "ConformanceError";
    err.nonRetryable = true;
    throw err;
  },
};

const worker = new PyweftWorker({
  url: process.env.PYWEFT_WORKER_URL ?? "ws://127.0.0.1:8000/api/v1/tasks/default/stream",
  token: process.env.PYWEFT_WORKER_TOKEN,
  workerId: process.env.PYWEFT_WORKER_ID,
  activities,
  concurrency: 4,
});

for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => worker.stop());

try {
  const ack = await worker.start();
  console.log(`worker ${ack.workerId} serves ${ack.queues.join(", ")}`);
} catch (err) {
  console.error(String(err.message ?? err));
  process.exit(1);
}
await worker.stopped;
process.exit(0);
