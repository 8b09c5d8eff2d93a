// src/cli/main.ts lists the command groups (name, description) so `forelead --help` needs none of
// their modules; each group's module must load and agree with its row.
import { describe, expect, it } from "vitest";
import { commandGroups } from "../../src/cli/main.js";

describe("the command groups of forelead", () => {
  it("every group loads a command of its name and description, each once", async () => {
    expect(new Set(commandGroups.map((g) => g.name)).size).toBe(commandGroups.length);
    for (const group of commandGroups) {
      const command = await group.load();
      expect(command.name()).toBe(group.name);
      expect(command.description(), group.name).toBe(group.description);
    }
  });
});
