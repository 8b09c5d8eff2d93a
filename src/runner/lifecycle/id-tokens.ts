import { chown, mkdtemp, rename, rm, stat, writeFile } from "node:fs/promises";
import http from "node:http";
import { join } from "node:path";
import { idTokenFileName, idTokenSocketName } from "../../protocol/id-token-files.js";
import { privateJobDir } from "../executors/secret-files.js";
import type { ServerClock } from "./clock.js";
import { RunnerApiError, type RunnerClient } from "../transport/client.js";

/** A job's ID tokens kept fresh in files while it runs. */
export interface IdTokenFiles {
  /** The directory (FORELEAD_ID_TOKEN_DIR); the executor hands it to the job. */
  readonly dir: string;
  /** The socket that answers a fresh token on demand (FORELEAD_ID_TOKEN_SOCKET), when asked. */
  readonly socket: string | undefined;
  /** Stops refreshing and removes the directory. */
  remove(): Promise<void>;
}

/** Refreshes a token when this share of its life is left; the lease renews at about a third. */
const refreshAtShareLeft = 0.5;

/**
 * Fetches a token for each of `audiences` under the lease and writes it to its file
 * (idTokenFileName) in a private directory beside the job's secret files; then refreshes each
 * one when half its life is left, replacing the file whole (write, then rename), so a reader never
 * sees half a token. The first fetch failing throws (the job cannot have its identity); a failed
 * refresh is logged and tried again a second later. A token is never logged: each is given to
 * `mask` before the job can read it.
 */
export async function keepIdTokenFiles(options: {
  readonly client: RunnerClient;
  readonly clock: ServerClock;
  readonly jobId: string;
  readonly leaseToken: string;
  readonly audiences: readonly string[];
  readonly jobDir: string;
  /** Also serve the on-demand socket (process jobs: a container cannot reach a host socket). */
  readonly socket?: boolean;
  /** Masks a new token wherever the job's secrets are masked (the lease's SecretMasker). */
  readonly mask: (token: string) => void;
  readonly log: (message: string) => void;
}): Promise<IdTokenFiles> {
  const { client, jobId, leaseToken } = options;
  const dir = await privateJobDir(options.jobDir);
  const timers = new Map<string, NodeJS.Timeout>();
  let stopped = false;
  let server: http.Server | undefined;
  const remove = async () => {
    stopped = true;
    for (const t of timers.values()) clearTimeout(t);
    if (server) {
      const closed = new Promise((resolve) => server!.close(resolve));
      server.closeAllConnections();
      await closed;
    }
    await rm(dir, { recursive: true, force: true });
  };
  const write = async (audience: string) => {
    const { token, expiresAtMs } = await client.idToken(jobId, leaseToken, audience);
    options.mask(token);
    const file = join(dir, idTokenFileName(audience));
    const temp = await mkdtemp(join(dir, ".next-"));
    await writeFile(join(temp, "token"), token, { mode: 0o400 });
    // The directory may have been given to the job's own uid (process executor): so is the file.
    const owner = (await stat(dir)).uid;
    if (process.getuid?.() === 0 && owner !== 0) await chown(join(temp, "token"), owner, owner);
    await rename(join(temp, "token"), file);
    await rm(temp, { recursive: true, force: true });
    return expiresAtMs;
  };
  /** A token fetched now, for the socket (masked like the files' tokens). */
  const fresh = async (audience: string) => {
    const { token } = await client.idToken(jobId, leaseToken, audience);
    options.mask(token);
    return token;
  };
  const schedule = (audience: string, expiresAtMs: number) => {
    if (stopped) return;
    const leftMs = expiresAtMs - options.clock.nowMs();
    const inMs = Math.max(1000, leftMs * refreshAtShareLeft);
    timers.set(
      audience,
      setTimeout(() => {
        write(audience).then(
          (next) => schedule(audience, next),
          (err: unknown) => {
            if (stopped) return;
            options.log(
              `job ${jobId}: refreshing its ID token for audience ${JSON.stringify(audience)} ` +
                `failed, retrying: ${(err as Error).message}`,
            );
            schedule(audience, options.clock.nowMs() + 2000);
          },
        );
      }, inMs).unref(),
    );
  };
  try {
    for (const audience of options.audiences) schedule(audience, await write(audience));
    if (options.socket) server = await serveSocket(join(dir, idTokenSocketName), fresh);
  } catch (err) {
    await remove();
    throw err;
  }
  return { dir, socket: server && join(dir, idTokenSocketName), remove };
}

/**
 * The on-demand socket: `GET /id-token?audience=X` over HTTP answers a token fetched now (200,
 * text/plain), or the control plane's refusal (its status and message). Only the job's user can
 * reach it: it is in the job's private directory.
 */
async function serveSocket(
  path: string,
  fresh: (audience: string) => Promise<string>,
): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://socket.invalid");
    const audience = url.searchParams.get("audience");
    const answer = (status: number, text: string) => {
      res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
      res.end(text);
    };
    if (req.method !== "GET" || url.pathname !== "/id-token" || audience === null)
      return answer(404, "ask GET /id-token?audience=<audience>\n");
    fresh(audience).then(
      (token) => answer(200, token),
      (err: unknown) =>
        answer(err instanceof RunnerApiError ? err.status : 502, `${(err as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => resolve());
  });
  return server;
}
