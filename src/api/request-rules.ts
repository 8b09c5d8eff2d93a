import { Code, ConnectError } from "@connectrpc/connect";
import type { DescMessage } from "@bufbuild/protobuf";
import type { Principal } from "../identity/principal.js";

/** The only protocol version this control plane speaks. */
export const apiVersion = "v1";

/**
 * The rules every request message passes before its handler: `apiVersion`
 * must be "v1", and a runner's `runnerId` / `workspaceId` must be the ones in
 * its certificate (the body can never choose another runner or workspace).
 */
export function checkRequestMessage(
  schema: DescMessage,
  message: object,
  principal: Principal | undefined,
): void {
  const values = message as Record<string, unknown>;
  const has = fieldsOf(schema);
  if (has.apiVersion) checkApiVersion(values["apiVersion"]);
  if (principal?.kind !== "runner") return;
  if (has.runnerId) checkNamed("runnerId", "runner", values["runnerId"], principal.runnerId);
  if (has.workspaceId)
    checkNamed("workspaceId", "workspace", values["workspaceId"], principal.workspaceId);
}

/**
 * Which of the checked fields a message has, looked up once per schema (stream messages pass here
 * line by line).
 */
interface CheckedFields {
  readonly apiVersion: boolean;
  readonly runnerId: boolean;
  readonly workspaceId: boolean;
}

const checkedFields = new WeakMap<DescMessage, CheckedFields>();

function fieldsOf(schema: DescMessage): CheckedFields {
  let has = checkedFields.get(schema);
  if (!has) {
    const named = (name: string) => schema.fields.some((f) => f.name === name);
    has = {
      apiVersion: named("api_version"),
      runnerId: named("runner_id"),
      workspaceId: named("workspace_id"),
    };
    checkedFields.set(schema, has);
  }
  return has;
}

/** Throws invalid_argument unless `value` is "v1". */
export function checkApiVersion(value: unknown): void {
  if (value === apiVersion) return;
  if (value === undefined || value === "") {
    throw new ConnectError(
      `apiVersion is required; this control plane speaks "${apiVersion}"`,
      Code.InvalidArgument,
    );
  }
  throw new ConnectError(
    `apiVersion ${JSON.stringify(value)} is not supported; this control plane speaks "${apiVersion}"`,
    Code.InvalidArgument,
  );
}

function checkNamed(field: string, what: string, value: unknown, expected: string): void {
  if (value === undefined || value === "") {
    throw new ConnectError(
      `${field} is required; it must be this certificate's ${what} "${expected}"`,
      Code.InvalidArgument,
    );
  }
  if (value !== expected) {
    throw new ConnectError(
      `${field} ${JSON.stringify(value)} does not match the certificate's ${what} "${expected}"`,
      Code.PermissionDenied,
    );
  }
}
