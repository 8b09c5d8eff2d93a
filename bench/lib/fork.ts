import { fork, type ChildProcess } from "node:child_process";

/** A message to or from a client process: a `type` and its fields. */
export interface Message {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** A forked helper process (runner clients, a bare server), driven one request at a time. */
export interface BenchProcess {
  readonly pid: number;
  /** Sends `message`; resolves with the process's reply (a message of type "error" rejects). */
  call<R = Message>(message: Message): Promise<R>;
  /** Ends the process: "exit" message, SIGKILL after 10 s. */
  close(): Promise<void>;
}

/**
 * Forks `script` (a bench/clients/*.ts or bench/servers/*.ts file, run
 * through tsx): clients run apart from the server under test, so neither's
 * CPU is counted against the other.
 */
export function forkProcess(script: URL): BenchProcess {
  // BENCH_CPU_PROF_DIR=dir: each helper writes a V8 CPU profile there when it exits, as each
  // `forelead serve` does (docs/performance.md).
  const profile = process.env.BENCH_CPU_PROF_DIR
    ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF_DIR}`]
    : [];
  const child: ChildProcess = fork(script, [], {
    execArgv: [...profile, "--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  let pending: { resolve: (m: Message) => void; reject: (e: Error) => void } | undefined;
  child.on("message", (m: Message) => {
    const p = pending;
    pending = undefined;
    if (!p) return;
    if (m.type === "error") p.reject(new Error(`client ${child.pid}: ${String(m.message)}`));
    else p.resolve(m);
  });
  void exited.then((code) =>
    pending?.reject(new Error(`client ${child.pid} exited (code ${code}) during a request`)),
  );
  return {
    pid: child.pid!,
    call<R>(message: Message) {
      if (pending) return Promise.reject(new Error("one request at a time"));
      return new Promise<R>((resolve, reject) => {
        pending = { resolve: resolve as (m: Message) => void, reject };
        child.send(message);
      });
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.send({ type: "exit" });
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * The helper side: answers each message with `handle`'s reply, or an
 * "error" message; "exit" ends the process.
 */
export function serveRequests(handle: (m: Message) => Promise<Message>): void {
  process.on("message", (m: Message) => {
    if (m.type === "exit") {
      process.exit(0);
    }
    handle(m).then(
      (reply) => process.send!(reply),
      (err: Error) => process.send!({ type: "error", message: err.stack ?? err.message }),
    );
  });
}
