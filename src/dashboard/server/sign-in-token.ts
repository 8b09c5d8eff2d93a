import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { randomSecret, secretMatches } from "./sessions.js";

/**
 * The local sign-in: a random one-time token, written to a file only the operator can read (0600)
 * and shown on the operator's terminal, that a browser exchanges once for a session. It never
 * travels in argv, a URL or a log line. Once spent it is replaced by a new one in the same file, so
 * the operator can sign in another browser without a restart; each token works once.
 */
export interface SignInToken {
  /** The file holding the current token. */
  readonly file: string;
  /** True, and the token spent (a new one written), when `presented` is the current token. */
  redeem(presented: string): Promise<boolean>;
  /** Removes the file (the dashboard stops). */
  remove(): Promise<void>;
}

/**
 * The default token file of a dashboard listening on `port`:
 * `$XDG_STATE_HOME/forelead/dashboard-<port>.token` (`~/.local/state/...` when unset).
 */
export function defaultSignInTokenFile(port: number): string {
  const state = process.env.XDG_STATE_HOME || join(homedir(), ".local", "state");
  return join(state, "forelead", `dashboard-${port}.token`);
}

/** Writes `text` to `file` as a new 0600 file, replacing it whole (a reader sees one or the other). */
async function writePrivate(file: string, text: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${process.pid}.tmp`;
  await rm(temp, { force: true });
  await writeFile(temp, text, { mode: 0o600, flag: "wx" });
  await rename(temp, file);
}

/**
 * Makes the first token and writes it to `file`; `onToken` sees each new token (the command shows
 * it on a terminal).
 */
export async function createSignInToken(
  file: string,
  onToken: (token: string) => void = () => undefined,
): Promise<SignInToken> {
  const path = resolve(file);
  let current = "";
  // One redemption at a time: two browsers posting the same token cannot both win it.
  let queue: Promise<unknown> = Promise.resolve();
  const next = async () => {
    current = randomSecret();
    await writePrivate(path, `${current}\n`);
    onToken(current);
  };
  await next();
  return {
    file: path,
    redeem(presented) {
      const turn = queue.then(async () => {
        if (!secretMatches(presented, current)) return false;
        await next();
        return true;
      });
      queue = turn.catch(() => undefined);
      return turn;
    },
    async remove() {
      await rm(path, { force: true });
    },
  };
}
