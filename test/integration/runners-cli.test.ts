// `forelead runners inventory` and `forelead runners reap` against a real
// control plane, with certificate files as an operator would have them.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Command } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newJobId } from "../../src/broker/ids.js";
import { runnersCommand } from "../../src/cli/runners.js";
import { containerName, networkName } from "../../src/inventory/names.js";
import { runnerActor } from "../support/actors.js";
import { testAdminId } from "../support/control-plane.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";

const cp = useControlPlane();
let dir: string;
let certFlags: string[];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-cli-"));
  const admin = await cp.pki.service("test-admin");
  await writeFile(join(dir, "ca.pem"), cp.pki.ca.certPem);
  await writeFile(join(dir, "admin.pem"), admin.certPem);
  await writeFile(join(dir, "admin-key.pem"), admin.keyPem);
  certFlags = [
    "--server",
    cp.url,
    "--ca",
    join(dir, "ca.pem"),
    "--cert",
    join(dir, "admin.pem"),
    "--key",
    join(dir, "admin-key.pem"),
  ];
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Runs `forelead runners ...args` and returns what it printed. */
async function runners(...args: string[]): Promise<string> {
  let out = "";
  const program = new Command("forelead")
    .exitOverride()
    .addCommand(runnersCommand((t) => (out += t)));
  await program.parseAsync(["runners", ...args], { from: "user" });
  return out;
}

describe(`forelead runners (${databaseKind})`, () => {
  it("inventory prints the latest reports, flagged items and pending orders; reap records an order", async () => {
    expect(await runners("inventory", ...certFlags)).toBe("no inventory reports\n");
    const runner = await runnerActor(cp, "r1", "w1");
    const jobId = newJobId();
    const items = [
      {
        kind: "container",
        name: containerName(jobId, "main"),
        jobId,
        state: "exited",
        image: "busybox",
        cpu: 1,
        memory: "1024",
        orphan: false,
      },
      { kind: "network", name: networkName(jobId), jobId, state: "created", orphan: true },
    ];
    const reply = await runner.rest.request("POST", "/v1/runner/inventory", {
      apiVersion: "v1",
      runnerId: "r1",
      items,
    });
    expect(reply.status, reply.text).toBe(200);

    const ordered = await runners("reap", "r1", "network", networkName(jobId), ...certFlags);
    expect(ordered).toMatch(
      new RegExp(
        `^order \\d+ pending: runner r1 in workspace w1 is told to remove network ${networkName(jobId)}`,
      ),
    );

    const text = await runners("inventory", "r1", ...certFlags);
    expect(text).toMatch(
      /^runner r1 in workspace w1: reported at \S+Z \(\d+s ago\); 1 container, 1 network, 1 orphan$/m,
    );
    expect(text).toContain(
      `  container ${containerName(jobId, "main")}  exited  busybox  cpu 1  memory 1024\n`,
    );
    expect(text).toContain(`  network   ${networkName(jobId)}  created  ORPHAN\n`);
    expect(text).toMatch(
      new RegExp(
        `^  FLAGGED job_not_leased_here: container ` +
          `${containerName(jobId, "main")} is not called orphan, but job ${jobId} ` +
          `is not a job of workspace "w1"$`,
        "m",
      ),
    );
    expect(text).toMatch(
      new RegExp(
        `^  ORDER \\d+ pending: remove network ${networkName(jobId)} \\(ordered by ${testAdminId} at `,
        "m",
      ),
    );
    expect(text).toMatch(/^1 runner, 1 flagged item, 1 pending reap order$/m);
    // Without RUNNER: the summary, flags and orders, not every item.
    expect(await runners("inventory", ...certFlags)).not.toContain("  container ");

    await expect(
      runners("reap", "r1", "container", containerName(jobId, "main"), ...certFlags),
    ).rejects.toThrow(/does not call container .* an orphan/);
    await expect(
      runners("inventory", ...certFlags, "--cert", join(dir, "missing.pem")),
    ).rejects.toThrow(/cannot read --cert .*missing\.pem: ENOENT/);
    await runner.close();
  });
});
