// A pyweft remote worker for Node.js 20+, with no npm dependencies.
//
// It speaks the task protocol of a pyweft server (docs/guides/remote-workers.md) over
// the WebSocket client built into Node (behind --experimental-websocket on Node 20,
// on by default from Node 22). Activities are async functions of the task's JSON
// arguments; the second argument carries the attempt's context and an AbortSignal
// that fires when the server cancels the attempt or the worker stops.

const PROTOCOL_VERSION = 1;

export class PyweftWorker {
  /**
   * @param {object} options
   * @param {string} options.url  the task stream: ws(s)://host/api/v1/tasks/QUEUE/stream
   * @param {string} [options.token]  an API key with scope workers:write
   * @param {Record<string, Function>} options.activities  name -> async (args, ctx) => value
   * @param {number} [options.concurrency]  attempts at once (1..1000, default 4)
   * @param {string} [options.workerId]  unique among live workers
   * @param {number} [options.drainTimeoutMs]  how long a stop waits for in-flight work
   * @param {number} [options.reconnectTimeoutMs]  how long a dropped socket is retried
   */
  constructor({ url, token, activities, concurrency = 4, workerId, drainTimeoutMs = 30000,
    reconnectTimeoutMs = 30000 }) {
    if (typeof WebSocket !== "function") {
      throw new Error("no WebSocket client: run Node 20 with --experimental-websocket (or Node 22+)");
    }
    this.url = url;
    this.token = token;
    this.activities = activities;
    this.concurrency = concurrency;
    this.workerId = workerId ?? `node-${process.pid}-${Math.random().toString(16).slice(2, 8)}`;
    this.drainTimeoutMs = drainTimeoutMs;
    this.reconnectTimeoutMs = reconnectTimeoutMs;
    this.sessionId = null;
    this.jobs = new Map(); // operationId -> { token, abort, promise }
    this.unacked = new Map(); // operationId -> taskResult frame not yet acknowledged
    this.ws = null;
    this.stopping = false;
    this.beat = null;
    this.stopped = new Promise((resolve) => { this.resolveStopped = resolve; });
  }

  /** Connect and register; resolves on registerAck, rejects on a refusal. */
  start() {
    return new Promise((resolve, reject) => {
      const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
      const ws = new WebSocket(this.url, { headers });
      let registered = false;
      ws.onopen = () => {
        const inFlight = [...this.jobs].map(([operationId, job]) => ({ operationId, attemptToken: job.token }));
        for (const [operationId, frame] of this.unacked) {
          if (!this.jobs.has(operationId)) inFlight.push({ operationId, attemptToken: frame.attemptToken });
        }
        const register = {
          type: "register",
          protocolVersion: PROTOCOL_VERSION,
          workerId: this.workerId,
          activities: Object.keys(this.activities),
          concurrency: this.concurrency,
          inFlight,
          sdk: "pyweft-node-example/1",
        };
        if (this.sessionId) register.sessionId = this.sessionId;
        ws.send(JSON.stringify(register));
      };
      ws.onmessage = (event) => {
        let frame;
        try { frame = JSON.parse(event.data); } catch { return; }
        if (!registered) {
          if (frame.type === "registerAck") {
            registered = true;
            this.ws = ws;
            this.onAck(frame);
            resolve(frame);
          } else {
            reject(new Error(`registration refused: ${frame.code ?? frame.type}: ${frame.message ?? ""}`));
          }
          return;
        }
        this.onFrame(frame);
      };
      ws.onerror = () => {};
      ws.onclose = (event) => {
        if (!registered) {
          reject(new Error(`the task stream closed before registering (code ${event.code})`));
          return;
        }
        this.onClose(ws, event.code);
      };
    });
  }

  onAck(ack) {
    this.sessionId = ack.sessionId;
    const resumed = new Set(ack.resumed);
    for (const [operationId, job] of this.jobs) {
      if (!resumed.has(operationId)) job.abort.abort(new Error("given up while the worker was away"));
    }
    for (const [operationId, frame] of this.unacked) {
      if (resumed.has(operationId)) this.send(frame); else this.unacked.delete(operationId);
    }
    clearInterval(this.beat);
    this.beat = setInterval(() => this.send({ type: "heartbeat", workerId: this.workerId }),
      ack.heartbeatIntervalMs);
  }

  onFrame(frame) {
    switch (frame.type) {
      case "task": this.run(frame); break;
      case "cancel": {
        const job = this.jobs.get(frame.operationId);
        if (job && job.token === frame.attemptToken) job.abort.abort(new Error(frame.reason));
        break;
      }
      case "resultAck":
      case "resultRejected":
        if (frame.type === "resultRejected") {
          console.error(`result of ${frame.operationId} refused (${frame.code}): ${frame.message}`);
        }
        if (this.unacked.get(frame.operationId)?.attemptToken === frame.attemptToken) {
          this.unacked.delete(frame.operationId);
        }
        break;
      case "shutdown": this.stop(Math.min(this.drainTimeoutMs, frame.drainTimeoutMs)); break;
      case "protocolError": console.error(`protocol error ${frame.code}: ${frame.message}`); break;
      default: break; // unknown server frames are ignored
    }
  }

  async run(task) {
    const abort = new AbortController();
    const job = { token: task.attemptToken, abort };
    this.jobs.set(task.operationId, job);
    const reply = { type: "taskResult", operationId: task.operationId, attemptToken: task.attemptToken };
    const fn = this.activities[task.activityName];
    job.promise = (async () => {
      if (!fn) return { ...reply, status: "rejected", error: `no activity ${task.activityName} here` };
      const ctx = { attempt: task.attempt, workflowId: task.workflowId, step: task.step, signal: abort.signal };
      try {
        const value = await fn(task.input, ctx);
        if (abort.signal.aborted) return { ...reply, status: "cancelled", error: String(abort.signal.reason?.message) };
        return { ...reply, status: "completed", value: value ?? null };
      } catch (err) {
        if (abort.signal.aborted) return { ...reply, status: "cancelled", error: String(abort.signal.reason?.message) };
        return {
          ...reply,
          status: "failed",
          error: { message: String(err?.message ?? err), type: err?.name ?? "Error", nonRetryable: Boolean(err?.nonRetryable) },
        };
      }
    })();
    const result = await job.promise;
    this.jobs.delete(task.operationId);
    this.unacked.set(task.operationId, result);
    this.send(result);
  }

  send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
  }

  async onClose(ws, code) {
    if (this.ws !== ws) return;
    this.ws = null;
    clearInterval(this.beat);
    if (this.stopping || code === 1000 || code === 1001 || code === 1002 || code === 1008) {
      this.finish();
      return;
    }
    const deadline = Date.now() + this.reconnectTimeoutMs; // dropped: resume the session
    for (let delay = 50; Date.now() < deadline && !this.stopping; delay = Math.min(delay * 2, 1000)) {
      await new Promise((r) => setTimeout(r, delay));
      try { await this.start(); return; } catch { /* try again */ }
    }
    this.finish();
  }

  /** Drain: no new tasks, wait for in-flight ones up to timeoutMs, cancel the rest, close. */
  async stop(timeoutMs = this.drainTimeoutMs) {
    if (this.stopping) return this.stopped;
    this.stopping = true;
    this.send({ type: "drain" });
    const running = [...this.jobs.values()].map((j) => j.promise);
    let timer;
    const late = new Promise((r) => { timer = setTimeout(r, timeoutMs); });
    await Promise.race([Promise.all(running), late]);
    clearTimeout(timer);
    for (const job of this.jobs.values()) job.abort.abort(new Error("the worker is shutting down"));
    await Promise.all(running);
    await new Promise((r) => setTimeout(r, 0)); // let run() send the last results
    const until = Date.now() + 2000; // a moment for the acknowledgements
    while (this.unacked.size && this.ws && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    clearInterval(this.beat);
    if (this.ws) this.ws.close(1000, "worker stopped");
    this.finish();
    return this.stopped;
  }

  finish() {
    clearInterval(this.beat);
    this.resolveStopped();
  }
}

/** Resolve after ms milliseconds, or reject as soon as signal aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) { reject(signal.reason); return; }
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(timer); reject(signal.reason); }, { once: true });
  });
}
