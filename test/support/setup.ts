import "reflect-metadata";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// A serve started without --secrets-key makes its key in $XDG_CONFIG_HOME/forelead (as root,
// /etc/forelead without it): the tests' serves, and the CLI's config-file search, stay in a
// directory of the test run's own, never the host's.
process.env.XDG_CONFIG_HOME = mkdtempSync(join(tmpdir(), "forelead-test-xdg-"));
