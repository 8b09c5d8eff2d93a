import { createRequire } from "node:module";
import type { Writable } from "node:stream";

// The part of dockerode (5.x) the docker executor uses, typed here because
// @types/dockerode is not installed; with it, these interfaces can give way
// to the package's own types. Field names are the Docker Engine API's.

/** Options of POST /containers/create as the executor fills them. */
interface ContainerCreateOptions {
  name: string;
  Image: string;
  Cmd: string[];
  Env: string[];
  Labels: Record<string, string>;
  WorkingDir: string;
  AttachStdout: boolean;
  AttachStderr: boolean;
  Tty: boolean;
  HostConfig: {
    NetworkMode: string;
    Binds: string[];
    NanoCpus?: number;
    Memory?: number;
    MemorySwap?: number;
    PidsLimit?: number;
    SecurityOpt?: string[];
  };
}

/** The part of one Engine API stats document (GET /containers/{id}/stats) a sample reads. */
export interface DockerStats {
  readonly cpu_stats?: { readonly cpu_usage?: { readonly total_usage?: number } };
  readonly memory_stats?: {
    readonly usage?: number;
    /** cgroup v2: inactive_file; cgroup v1: total_inactive_file. */
    readonly stats?: { readonly inactive_file?: number; readonly total_inactive_file?: number };
  };
}

/** A container handle. */
export interface DockerContainer {
  readonly id: string;
  attach(options: { stream: true; stdout: true; stderr: true }): Promise<NodeJS.ReadableStream>;
  start(): Promise<unknown>;
  wait(): Promise<{ StatusCode: number }>;
  inspect(): Promise<{
    Name: string;
    Created: string;
    Config: { Image: string; Labels: Record<string, string> | null };
    State: { Status: string; ExitCode: number; OOMKilled: boolean };
    HostConfig: { NanoCpus?: number; Memory?: number };
  }>;
  /** A stream of JSON stats documents, about one a second, while the container runs. */
  stats(options: { stream: true }): Promise<NodeJS.ReadableStream>;
  /** One stats document now (`one-shot`: without waiting a second for precpu_stats). */
  stats(options: { stream: false; "one-shot": true }): Promise<DockerStats>;
  stop(options?: { t: number }): Promise<unknown>;
  kill(options?: { signal: string }): Promise<unknown>;
  remove(options?: { force?: boolean; v?: boolean }): Promise<unknown>;
}

/** A network handle. */
interface DockerNetwork {
  inspect(): Promise<{
    Name: string;
    Labels: Record<string, string> | null;
    Internal: boolean;
    Created: string;
  }>;
  remove(): Promise<unknown>;
}

/** The Docker client. */
export interface DockerClient {
  readonly modem: {
    demuxStream(stream: NodeJS.ReadableStream, stdout: Writable, stderr: Writable): void;
    followProgress(
      stream: NodeJS.ReadableStream,
      onFinished: (err: Error | null, output: Array<{ error?: string }>) => void,
    ): void;
  };
  ping(): Promise<unknown>;
  getImage(name: string): { inspect(): Promise<unknown> };
  pull(image: string): Promise<NodeJS.ReadableStream>;
  createNetwork(options: {
    Name: string;
    Internal: boolean;
    Labels: Record<string, string>;
    CheckDuplicate: boolean;
  }): Promise<DockerNetwork>;
  getNetwork(name: string): DockerNetwork;
  createContainer(options: ContainerCreateOptions): Promise<DockerContainer>;
  getContainer(name: string): DockerContainer;
  /** The engine's event log from `since` to `until` (Unix seconds), as a stream of JSON lines. */
  getEvents(options: {
    since: number;
    until: number;
    filters: Record<string, string[]>;
  }): Promise<NodeJS.ReadableStream>;
  listContainers(options: { all: boolean; filters: { label: string[] } }): Promise<
    Array<{
      Id: string;
      Names: string[];
      Labels: Record<string, string>;
      State: string;
      Image: string;
      Created: number;
    }>
  >;
  listNetworks(options: {
    filters: { label: string[] };
  }): Promise<Array<{ Name: string; Labels: Record<string, string> | null; Created: string }>>;
}

/** An error from the engine: dockerode sets the HTTP status as statusCode. */
export function dockerStatus(err: unknown): number | undefined {
  return typeof err === "object" &&
    err !== null &&
    "statusCode" in err &&
    typeof err.statusCode === "number"
    ? err.statusCode
    : undefined;
}

/** The engine's message of an error, without dockerode's "(HTTP code ...)" prefix noise. */
export function dockerMessage(err: unknown): string {
  const json =
    typeof err === "object" && err !== null && "json" in err
      ? (err as { json?: { message?: string } }).json
      : undefined;
  return json?.message ?? (err as Error).message ?? String(err);
}

/**
 * A dockerode client for the engine at DOCKER_HOST (or the default socket).
 * dockerode is loaded only here, so the process executor runs on machines
 * without it.
 */
export function createDockerClient(): DockerClient {
  const require = createRequire(import.meta.url);
  let Docker: new () => DockerClient;
  try {
    Docker = require("dockerode") as new () => DockerClient;
  } catch (err) {
    throw new Error(
      `the docker executor needs the dockerode package (npm install dockerode@5): ${(err as Error).message}`,
    );
  }
  return new Docker();
}
