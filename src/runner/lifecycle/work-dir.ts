// The runner's work directory is the runner's own: a directory another local user made, or could
// replace, would let that user plant files the runner trusts (pid records, secret file leftovers).
import { mkdir, realpath, stat } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";

/**
 * Where a runner's job directories are made unless --work-dir says: beside its enrolled identity
 * (`<state-dir>/<runner-id>/work`), else in the user's state directory
 * (`$XDG_STATE_HOME/forelead/runners/<runner-id>/work`, `~/.local/state/...` by default; as root
 * `/var/lib/forelead/runners/<runner-id>/work`). Never in a shared temporary directory.
 */
export function defaultWorkDir(runnerId: string, stateDir?: string): string {
  if (stateDir) return join(resolve(stateDir), runnerId, "work");
  const base =
    process.getuid?.() === 0
      ? "/var/lib/forelead"
      : join(process.env.XDG_STATE_HOME || join(homedir(), ".local", "state"), "forelead");
  return join(base, "runners", runnerId, "work");
}

/**
 * Makes `dir` (0711) if missing and refuses it unless it is the runner's own: the directory and
 * every parent up to / must belong to this process's uid or to root, and none may be writable by
 * group or others, except a root-owned parent with the sticky bit (such as /tmp), where no other
 * user can rename or replace an entry this uid owns.
 */
export async function prepareWorkDir(dir: string): Promise<string> {
  // 0711: jobs run as uids of their own must pass through to their directories, never list them.
  await mkdir(resolve(dir), { recursive: true, mode: 0o711 });
  // The real directories are checked (systemd's DynamicUser links /var/cache/NAME to private/NAME).
  const path = await realpath(dir);
  const uid = process.getuid?.();
  if (uid === undefined) return path; // no uids to compare (not a POSIX host)
  for (let at = path; ; at = dirname(at)) {
    const st = await stat(at);
    const fix = `use a directory of this user's own (--work-dir), or fix it: chown ${uid} and chmod go-w`;
    if (st.uid !== uid && st.uid !== 0)
      throw new Error(
        `work directory ${path}: ${at} belongs to uid ${st.uid}, not to this runner (uid ${uid}) or root; ${fix}`,
      );
    const writable = (st.mode & 0o022) !== 0;
    const sticky = (st.mode & 0o1000) !== 0;
    if (writable && !(at !== path && st.uid === 0 && sticky))
      throw new Error(
        `work directory ${path}: ${at} is writable by ` +
          `${st.mode & 0o002 ? "every user" : "its group"} (mode ` +
          `${(st.mode & 0o7777).toString(8)}); ${fix}`,
      );
    if (at === dirname(at)) return path;
  }
}
