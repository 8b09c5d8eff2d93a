import { Code, ConnectError } from "@connectrpc/connect";
import { parseLauncherName, type LauncherKind } from "./names.js";

/** One item of an inventory report as the runner sent it (decoded from the wire). */
export interface ReportedItem {
  readonly kind: string;
  readonly name: string;
  readonly jobId: string;
  readonly state: string;
  readonly image: string;
  /** When the runtime created it; undefined when the runner did not say. */
  readonly createdAt: Date | undefined;
  readonly cpu: number;
  readonly memory: bigint | number;
  readonly orphan: boolean;
}

/** An item that passed every rule: its name is a launcher name and its jobId the name's. */
export interface InventoryItem {
  readonly kind: LauncherKind;
  readonly name: string;
  readonly jobId: string;
  /** The task of a container; undefined for a network. */
  readonly task: string | undefined;
  readonly state: string;
  readonly image: string;
  readonly createdAt: Date | undefined;
  readonly cpu: number;
  readonly memory: number;
  readonly orphan: boolean;
}

/**
 * Bounds of one report. 10,000 items is far past what a runner with the
 * largest allowed slot count (1,024) runs with a few containers per job;
 * in practice the 1 MiB request body bound (about 4,000 items of typical
 * size) binds first. Field bounds keep one report from storing junk.
 */
const reportLimits = {
  maxItems: 10_000,
  maxStateLength: 64,
  maxImageLength: 1024,
  maxCpu: 65_536,
} as const;

/**
 * Checks every item of a report; the first broken rule refuses the whole
 * report (invalid_argument naming the item's index and why), so nothing of a
 * report is stored unless all of it is good.
 */
export function validateReport(items: readonly ReportedItem[]): InventoryItem[] {
  if (items.length > reportLimits.maxItems) {
    throw new ConnectError(
      `the report has ${items.length} items; at most ${reportLimits.maxItems} are accepted in one report`,
      Code.InvalidArgument,
    );
  }
  const seen = new Map<string, number>();
  return items.map((item, index) => {
    const checked = validateItem(item, index);
    const key = `${checked.kind}/${checked.name}`;
    const first = seen.get(key);
    if (first !== undefined)
      refuse(
        index,
        `${checked.kind} ${JSON.stringify(checked.name)} is already listed as items[${first}]`,
      );
    seen.set(key, index);
    return checked;
  });
}

function validateItem(item: ReportedItem, index: number): InventoryItem {
  if (item.kind === "") refuse(index, 'kind is required ("container" or "network")');
  if (item.name === "") refuse(index, "name is required");
  if (item.jobId === "") refuse(index, "jobId is required");
  const parsed = parseLauncherName(item.kind, item.name);
  if (!parsed.ok)
    refuse(
      index,
      `${parsed.reason}; only names the launcher generates are accepted (docs/launcher-names.md)`,
    );
  if (item.jobId !== parsed.jobId) {
    refuse(
      index,
      `jobId ${JSON.stringify(item.jobId.slice(0, 80))} does not match the job ` +
        `id ${parsed.jobId} in name ${JSON.stringify(item.name)}`,
    );
  }
  if (item.state.length > reportLimits.maxStateLength)
    refuse(index, `state is longer than ${reportLimits.maxStateLength} characters`);
  if (item.image.length > reportLimits.maxImageLength)
    refuse(index, `image is longer than ${reportLimits.maxImageLength} characters`);
  if (!Number.isFinite(item.cpu) || item.cpu < 0 || item.cpu > reportLimits.maxCpu) {
    refuse(index, `cpu must be a number from 0 to ${reportLimits.maxCpu}; got ${item.cpu}`);
  }
  const memory = Number(item.memory);
  if (!Number.isSafeInteger(memory) || memory < 0)
    refuse(index, `memory must be a non-negative byte count below 2^53; got ${item.memory}`);
  if (item.createdAt !== undefined && Number.isNaN(item.createdAt.getTime()))
    refuse(index, "createdAt is not a valid time");
  return {
    kind: parsed.kind,
    name: item.name,
    jobId: parsed.jobId,
    task: parsed.task,
    state: item.state,
    image: item.image,
    createdAt: item.createdAt,
    cpu: item.cpu,
    memory,
    orphan: item.orphan,
  };
}

function refuse(index: number, why: string): never {
  throw new ConnectError(
    `items[${index}]: ${why}; nothing from this report was stored`,
    Code.InvalidArgument,
  );
}
