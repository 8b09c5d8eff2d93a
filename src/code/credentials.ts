import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A repository as git reaches it: its URL and the credential for it, if any. */
export interface GitRemote {
  readonly url: string;
  readonly credential: string | null;
}

/** What a git command needs to reach a remote: environment additions and the strings to redact. */
export interface RemoteAccess {
  readonly env: Readonly<Record<string, string>>;
  readonly secrets: readonly string[];
}

/** The user name sent with an https credential when the URL names none. */
const defaultHttpsUser = "forelead";

/**
 * Runs `fn` with what git needs to authenticate to `remote`, and removes it
 * afterwards. The credential never goes into argv, a URL or a config file
 * git keeps: it is written (0600) into a private directory (0700) made for
 * this call, and git reads it through
 *  - https: a GIT_ASKPASS script that prints the user name (from the URL, or
 *    "forelead") or the contents of that file;
 *  - ssh: GIT_SSH_COMMAND with `-i <that file>` (the credential is a private key).
 * Local paths and file:// need no credential.
 */
export async function withRemoteAccess<T>(
  remote: GitRemote,
  fn: (access: RemoteAccess) => Promise<T>,
): Promise<T> {
  const credential = remote.credential;
  if (!credential) return fn({ env: {}, secrets: [] });
  const dir = await mkdtemp(join(tmpdir(), "forelead-git-"));
  try {
    await chmod(dir, 0o700);
    const secretFile = join(dir, "secret");
    const secrets = [credential];
    if (remote.url.startsWith("ssh://")) {
      await writeFile(secretFile, credential.endsWith("\n") ? credential : `${credential}\n`, {
        mode: 0o600,
      });
      // mkdtemp paths hold no quote; git runs GIT_SSH_COMMAND through a shell. Host keys are
      // checked strictly against the serving user's known_hosts: a first connection is not trusted
      // blindly.
      const env = {
        GIT_SSH_COMMAND: `ssh -i '${secretFile}' -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes`,
      };
      return await fn({ env, secrets });
    }
    await writeFile(secretFile, credential, { mode: 0o600 });
    const askpass = join(dir, "askpass");
    await writeFile(askpass, askpassScript, { mode: 0o700 });
    const user = decodeURIComponent(new URL(remote.url).username) || defaultHttpsUser;
    return await fn({
      env: { GIT_ASKPASS: askpass, FORELEAD_GIT_USER: user, FORELEAD_GIT_SECRET_FILE: secretFile },
      secrets,
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * git asks "Username for ..." then "Password for ...": answer each from the environment or the
 * secret file.
 */
const askpassScript = `#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$FORELEAD_GIT_USER" ;;
  *) cat "$FORELEAD_GIT_SECRET_FILE" ;;
esac
`;
