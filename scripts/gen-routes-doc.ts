// Writes docs/routes.md from the route options of the served services. Run by `npm run generate`
// after `buf generate`; test/unit/routes-doc.test.ts fails when it is stale.
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { renderRoutesDoc } from "../src/api/routes-doc.js";

const target = fileURLToPath(new URL("../docs/routes.md", import.meta.url));
writeFileSync(target, renderRoutesDoc());
console.log(`wrote ${target}`);
