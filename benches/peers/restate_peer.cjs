// Restate's side of the peer comparison (the protocol: protocol.py; this is
// its JavaScript twin). One Node process is both the service (an HTTP/2
// endpoint of @restatedev/restate-sdk on 127.0.0.1:$FUSEE_PEER_RESTATE_SERVICE_PORT,
// registered with the admin API at $FUSEE_PEER_RESTATE_ADMIN) and the
// client (ingress calls to $FUSEE_PEER_RESTATE_INGRESS). A step is a
// `ctx.run`: the SDK awaits the server's acknowledgement that the entry is
// in the journal (the server's log, fsynced by default) before the
// workflow goes on. Each run is a Restate workflow keyed by the driver's id,
// so a fresh process after a SIGKILL attaches to the same runs.

// Node 20 lacks Promise.withResolvers, which the SDK uses (Node 22 has it).
if (typeof Promise.withResolvers !== "function") {
  Promise.withResolvers = function () {
    let resolve, reject;
    const promise = new this((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}

const http2 = require("node:http2");
const readline = require("node:readline");
const restate = require("@restatedev/restate-sdk");

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const ADMIN = env("FUSEE_PEER_RESTATE_ADMIN");
const INGRESS = env("FUSEE_PEER_RESTATE_INGRESS");
const SERVICE_PORT = Number(env("FUSEE_PEER_RESTATE_SERVICE_PORT"));

const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const stamps = [];

const chain = restate.workflow({
  name: "chain",
  handlers: {
    run: async (ctx, n) => {
      for (let i = 0; i < n; i++) {
        await ctx.run("stamp", () => {
          stamps.push(process.hrtime.bigint());
        });
      }
      return n;
    },
  },
});

const steps = restate.workflow({
  name: "steps",
  handlers: {
    run: async (ctx, n) => {
      for (let i = 0; i < n; i++) {
        await ctx.run("noop", () => {});
      }
      return n;
    },
  },
});

const sleeper = restate.workflow({
  name: "sleeper",
  handlers: {
    run: async (ctx, ms) => {
      await ctx.sleep(ms); // a durable timer on the server
      return ms;
    },
  },
});

async function serve() {
  const handler = restate.createEndpointHandler({ services: [chain, steps, sleeper] });
  const server = http2.createServer(handler);
  await new Promise((res, rej) => {
    server.once("error", rej);
    server.listen(SERVICE_PORT, "127.0.0.1", res);
  });
  // The server may still be starting: retry for up to 90 s. Registering
  // again (a restarted process) is accepted: the same services.
  const deadline = Date.now() + 90_000;
  for (;;) {
    let why;
    try {
      const r = await fetch(`${ADMIN}/deployments`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ uri: `http://127.0.0.1:${SERVICE_PORT}`, force: true }),
      });
      if (r.ok) return server;
      why = `${r.status} ${await r.text()}`;
    } catch (e) {
      why = String(e);
    }
    if (Date.now() > deadline) throw new Error(`registering the service: ${why}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

async function call(url, init) {
  const r = await fetch(url, init);
  const text = await r.text();
  if (!r.ok) throw new Error(`${url}: ${r.status} ${text}`);
  return text === "" ? null : JSON.parse(text);
}

const send = (wf, key, arg) =>
  call(`${INGRESS}/${wf}/${encodeURIComponent(key)}/run/send`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(arg),
  });

const attach = (wf, key) => call(`${INGRESS}/restate/workflow/${wf}/${encodeURIComponent(key)}/attach`);

function check(name, got, expected) {
  if (got !== expected) throw new Error(`${name} returned ${JSON.stringify(got)}, expected ${expected}`);
}

// At most this many requests in flight from the client, as Fusee's driver
// keeps a window of 1,024.
const WINDOW = 1024;
async function windowed(n, f) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      await f(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(WINDOW, n) }, worker));
}

async function awaitAll(wf, prefix, n, expected, progress) {
  let done = 0;
  await windowed(n, async (i) => {
    check(`${prefix}-${i}`, await attach(wf, `${prefix}-${i}`), expected);
    done++;
    if (progress) emit({ done });
  });
}

const commands = {
  async chain(id, n) {
    n = Number(n);
    await new Promise((res) => {
      emit({ ready: true });
      readline.createInterface({ input: process.stdin }).once("line", res);
    });
    await send("chain", id, n);
    check(id, await attach("chain", id), n);
    if (stamps.length !== n) throw new Error(`${stamps.length} steps ran, ${n} asked`);
    const gaps = [];
    for (let i = 1; i < stamps.length; i++) gaps.push(Number(stamps[i] - stamps[i - 1]) / 1000);
    return { gaps_us: gaps };
  },
  async fanout(prefix, runs, n) {
    runs = Number(runs);
    n = Number(n);
    const t = performance.now();
    await windowed(runs, (i) => send("steps", `${prefix}-${i}`, n));
    await awaitAll("steps", prefix, runs, n, true);
    return { steps: runs * n, elapsed_s: (performance.now() - t) / 1000 };
  },
  async timers(prefix, count, ms) {
    count = Number(count);
    ms = Number(ms);
    const t = performance.now();
    await windowed(count, (i) => send("sleeper", `${prefix}-${i}`, ms));
    await awaitAll("sleeper", prefix, count, ms, false);
    return { all_done_s: (performance.now() - t) / 1000 };
  },
  async recover(prefix, runs, n) {
    runs = Number(runs);
    n = Number(n);
    const t = performance.now();
    await awaitAll("steps", prefix, runs, n, false);
    return { elapsed_s: (performance.now() - t) / 1000, completed: runs };
  },
};

// A fresh server elects its partitions' leaders on first use: one short
// workflow per partition (24 by default; keys spread by hash, so twice as
// many) before anything is timed, as every other subject starts warm.
async function warmUp() {
  const keys = Array.from({ length: 48 }, (_, i) => `warm-${process.pid}-${Date.now()}-${i}`);
  await Promise.all(keys.map((k) => send("steps", k, 1)));
  for (const k of keys) check(k, await attach("steps", k), 1);
}

async function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (!commands[cmd]) {
    emit({ error: `usage: restate_peer.cjs ${Object.keys(commands).join("|")} ARGS...` });
    process.exit(2);
  }
  let server;
  try {
    // The service first: after a kill, the server's retries reach it.
    server = await serve();
    // Not before a recovery: the server's state after the kill is its own.
    if (cmd !== "recover") await warmUp();
    emit({ result: await commands[cmd](...args) });
    process.exit(0);
  } catch (e) {
    emit({ error: String(e && e.stack ? e.message : e) });
    process.exit(1);
  }
}

main();
