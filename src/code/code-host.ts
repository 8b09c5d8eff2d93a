import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely } from "kysely";
import type { LeaseCall } from "../broker/leases/views.js";
import type { CodeHooks } from "../broker/leases/pinning.js";
import type { Database } from "../store/schema.js";
import { bundleChunks, defaultMaxBundleBytes } from "./bundles.js";
import { currentHead, openBundle, type BundleRequest } from "./code-access.js";
import { withRemoteAccess } from "./credentials.js";
import { GitError, gitTimeouts, runGit } from "./git.js";
import { createKeyedQueue } from "./keyed-queue.js";
import { checkBranchName, createMirrors } from "./mirror.js";
import { publishCommit, type Published } from "./publish.js";
import type { SecretBox } from "../secrets/box.js";
import {
  findRepository,
  listRepositories,
  lookUpRepository,
  upsertRepository,
  validateRegistration,
  type RegisterRepositoryInput,
  type RepositoryView,
} from "./repositories.js";

/** Options of the code host. */
export interface CodeHostOptions {
  readonly db: Kysely<Database>;
  /** Seals and opens repository credentials (src/secrets). */
  readonly secrets: SecretBox;
  /**
   * Where mirrors and scratch files live; a private temporary directory (removed on close) when
   * omitted.
   */
  readonly codeDir?: string;
  /** Cap of one bundle, either way; 256 MiB by default. */
  readonly maxBundleBytes?: number;
}

/**
 * The control plane as the only holder of code-host credentials: it
 * registers repositories, resolves and pins branches, builds bundles of
 * exactly the permitted commit, and publishes agent commits. Runners get
 * commit ids and bundles, never a URL's secret or a credential.
 */
export interface CodeHost extends CodeHooks {
  readonly maxBundleBytes: number;
  register(input: RegisterRepositoryInput, by: string): Promise<RepositoryView>;
  list(): Promise<RepositoryView[]>;
  head(call: LeaseCall): Promise<string>;
  /** The permitted bundle in chunks; every refusal is thrown before the first chunk. */
  bundle(req: BundleRequest): AsyncGenerator<Uint8Array>;
  /** `chunks` must already be bounded by the caller (maxBundleBytes). */
  publish(call: LeaseCall, chunks: AsyncIterable<Uint8Array>): Promise<Published>;
  close(): Promise<void>;
}

/** Starts a code host over `options.db`. */
export async function createCodeHost(options: CodeHostOptions): Promise<CodeHost> {
  const owned = options.codeDir === undefined;
  const codeDir = options.codeDir ?? (await mkdtemp(join(tmpdir(), "forelead-code-")));
  const mirrors = createMirrors(join(codeDir, "mirrors"));
  const maxBundleBytes = options.maxBundleBytes ?? defaultMaxBundleBytes;
  const deps = {
    db: options.db,
    secrets: options.secrets,
    mirrors,
    bundleQueue: createKeyedQueue(),
    maxBundleBytes,
    scratchDir: join(codeDir, "scratch"),
  };

  return {
    maxBundleBytes,
    async register(input, by) {
      validateRegistration(input);
      // Registering an unreachable repository (or a wrong credential) is refused now, not at the
      // first job.
      await withRemoteAccess({ url: input.url, credential: input.credential || null }, (access) =>
        runGit(["ls-remote", "--heads", "--", input.url], {
          timeoutMs: gitTimeouts.local,
          ...access,
        }),
      ).catch((err: unknown) => {
        if (err instanceof GitError)
          throw new ConnectError(
            `repository ${input.name} at ${input.url} could not be read: ${err.message}`,
            Code.FailedPrecondition,
          );
        throw err;
      });
      return upsertRepository(options.db, options.secrets, input, by);
    },
    list: () => listRepositories(options.db),
    async checkTarget(repository, targetBranch) {
      const repo = await findRepository(options.db, options.secrets, repository);
      checkBranchName(targetBranch);
      const head = await mirrors.resolveBranch(repo, targetBranch);
      if (!head)
        throw new ConnectError(
          `targetBranch ${JSON.stringify(targetBranch)} does not exist in repository ${JSON.stringify(repository)}`,
          Code.InvalidArgument,
        );
    },
    async resolvePin(repository, targetBranch) {
      const repo = await lookUpRepository(options.db, options.secrets, repository);
      if (!repo)
        return { refusal: `repository ${JSON.stringify(repository)} is no longer registered` };
      const head = await mirrors.resolveBranch(repo, targetBranch);
      return (
        head ?? {
          refusal:
            `branch ${JSON.stringify(targetBranch)} no longer exists in repository ` +
            `${JSON.stringify(repository)}`,
        }
      );
    },
    head: (call) => currentHead(deps, call),
    async *bundle(req) {
      yield* bundleChunks(await openBundle(deps, req));
    },
    publish: (call, chunks) => publishCommit(deps, call, chunks),
    async close() {
      if (owned) await rm(codeDir, { recursive: true, force: true });
    },
  };
}
