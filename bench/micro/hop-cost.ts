// What one hop between two processes costs on this machine: a 1-byte request and its echo over
// loopback TCP, back to back and with the requester idle in between (1 ms, 10 ms), and the CPU
// time each side spends per round trip (docs/performance.md, section 2, "What a hop costs"). A
// job crosses such hops between the client, the control plane and Postgres many times; a process
// woken from idle pays for the wake-up itself, which back-to-back requests share. Not part of
// `npm run bench`. Run: node --import tsx bench/micro/hop-cost.ts
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { forkProcess } from "../lib/fork.js";

const echo = forkProcess(new URL("../servers/echo-tcp.ts", import.meta.url));
try {
  const { port } = await echo.call<{ port: number }>({ type: "start" });
  const socket = net.connect(port, "127.0.0.1");
  socket.setNoDelay(true);
  await new Promise((resolve) => socket.once("connect", resolve));
  const serverMicros = async () => (await echo.call<{ micros: number }>({ type: "cpu" })).micros;
  const roundTrip = () =>
    new Promise<void>((resolve) => {
      socket.once("data", () => resolve());
      socket.write("x");
    });
  console.log(
    "| idle between requests | round trips | wall µs a round trip | requester CPU µs | echo server CPU µs |",
  );
  console.log("|---|--:|--:|--:|--:|");
  for (const [gapMs, count] of [
    [0, 5000],
    [0, 5000],
    [1, 1000],
    [10, 300],
  ] as const) {
    const server0 = await serverMicros();
    const client0 = process.cpuUsage();
    let wall = 0;
    for (let i = 0; i < count; i++) {
      const t = performance.now();
      await roundTrip();
      wall += performance.now() - t;
      if (gapMs) await sleep(gapMs);
    }
    const client = process.cpuUsage(client0);
    const server = (await serverMicros()) - server0;
    console.log(
      `| ${gapMs} ms | ${count} | ${((wall * 1000) / count).toFixed(0)} | ` +
        `${((client.user + client.system) / count).toFixed(0)} | ` +
        `${(server / count).toFixed(0)} |`,
    );
  }
  socket.destroy();
} finally {
  await echo.close();
}
