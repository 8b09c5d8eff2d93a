// src/cli/main.ts lists the command groups (name, description) so `forelead --help` needs none of
// their modules; each group's module must load a command of its row's name, and leave the
// description to the row (its one home: main.ts gives it to the loaded command).
import { describe, expect, it } from "vitest";
import { commandGroups } from "../../src/cli/main.js";

describe("the command groups of forelead", () => {
  it("every group loads a command of its name, each once, with no description of its own", async () => {
    expect(new Set(commandGroups.map((g) => g.name)).size).toBe(commandGroups.length);
    for (const group of commandGroups) {
      const command = await group.load();
      expect(command.name()).toBe(group.name);
      expect(
        command.description(),
        `${group.name}: the row in main.ts is the description's one home`,
      ).toBe("");
      expect(group.description.length, group.name).toBeGreaterThan(10);
    }
  });
});
