// The launcher's names are the contract between the runner (which makes them)
// and the control plane (which accepts only them in inventory reports).
import { describe, expect, it } from "vitest";
import { newJobId } from "../../src/broker/ids.js";
import {
  containerName,
  launcherLabels,
  maxLauncherNameLength,
  networkName,
  parseLauncherName,
} from "../../src/inventory/names.js";

const jobId = "0190f1e2-3c4d-7e5f-8a9b-0c1d2e3f4a5b";

function reasonOf(kind: string, name: string): string {
  const parsed = parseLauncherName(kind, name);
  if (parsed.ok) throw new Error(`${name} was accepted as a ${kind} name`);
  return parsed.reason;
}

describe("launcher names", () => {
  it("a container is forelead-<jobId>-<task> and a network forelead-<jobId>", () => {
    expect(containerName(jobId, "main")).toBe(`forelead-${jobId}-main`);
    expect(networkName(jobId)).toBe(`forelead-${jobId}`);
  });

  it("every generated name parses back to its job and task", () => {
    for (let i = 0; i < 50; i++) {
      const id = newJobId();
      for (const task of ["main", "a", "0", "db-1", "x".repeat(31), "ends-with-"]) {
        expect(parseLauncherName("container", containerName(id, task))).toEqual({
          ok: true,
          kind: "container",
          jobId: id,
          task,
        });
      }
      expect(parseLauncherName("network", networkName(id))).toEqual({
        ok: true,
        kind: "network",
        jobId: id,
        task: undefined,
      });
    }
  });

  it("names fit Docker's name rule and the documented maximum length", () => {
    const longest = containerName(jobId, "z".repeat(31));
    expect(longest).toHaveLength(maxLauncherNameLength);
    expect(longest).toMatch(/^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/);
  });

  it("building a name refuses a job id that is not a lowercase UUID or a bad task", () => {
    expect(() => containerName(jobId.toUpperCase(), "main")).toThrow(RangeError);
    expect(() => networkName("job-1")).toThrow(/not a lowercase UUID/);
    expect(() => containerName(jobId, "")).toThrow(/not a task name/);
    expect(() => containerName(jobId, "Main")).toThrow(RangeError);
    expect(() => containerName(jobId, "-main")).toThrow(RangeError);
    expect(() => containerName(jobId, "a_b")).toThrow(RangeError);
    expect(() => containerName(jobId, "x".repeat(32))).toThrow(RangeError);
  });

  it("an unknown kind is refused", () => {
    expect(reasonOf("volume", `forelead-${jobId}`)).toMatch(
      /kind "volume" is not "container" or "network"/,
    );
    expect(reasonOf("", `forelead-${jobId}`)).toMatch(/kind ""/);
  });

  it("a foreign name is refused with the reason", () => {
    expect(reasonOf("container", "postgres")).toMatch(/does not start with "forelead-"/);
    expect(reasonOf("container", `/forelead-${jobId}-main`)).toMatch(/strip Docker's leading/);
    expect(reasonOf("container", "forelead-not-a-job-main")).toMatch(/lowercase job id/);
    expect(reasonOf("container", `forelead-${jobId.toUpperCase()}-main`)).toMatch(
      /lowercase job id/,
    );
    expect(reasonOf("container", `forelead-${jobId}`)).toMatch(/not a container name/);
    expect(reasonOf("container", `forelead-${jobId}main`)).toMatch(/not a container name/);
    expect(reasonOf("container", `forelead-${jobId}-`)).toMatch(/task ""/);
    expect(reasonOf("container", `forelead-${jobId}-Main`)).toMatch(/task "Main"/);
    expect(reasonOf("container", `forelead-${jobId}-a.b`)).toMatch(/task "a.b"/);
    expect(reasonOf("container", `forelead-${jobId}-${"x".repeat(32)}`)).toMatch(/longer than 77/);
    expect(reasonOf("network", `forelead-${jobId}-main`)).toMatch(/not a network name/);
    expect(reasonOf("network", "bridge")).toMatch(/does not start with/);
  });

  it("a container name that happens to look like a network is not one, and vice versa", () => {
    expect(parseLauncherName("network", containerName(jobId, "main")).ok).toBe(false);
    expect(parseLauncherName("container", networkName(jobId)).ok).toBe(false);
  });

  it("labels carry runner, workspace, task and job; a network's task label is empty", () => {
    expect(launcherLabels({ runnerId: "r1", workspaceId: "w1", jobId, task: "main" })).toEqual({
      "forelead.runner": "r1",
      "forelead.workspace": "w1",
      "forelead.task": "main",
      "forelead.job": jobId,
    });
    expect(launcherLabels({ runnerId: "r1", workspaceId: "w1", jobId })["forelead.task"]).toBe("");
  });
});
