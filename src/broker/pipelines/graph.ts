import { bad } from "../jobs/rules.js";
import { artifactNameProblem } from "../../artifacts/names.js";

/** Bounds on a pipeline: past them a submit is refused by name. */
const pipelineLimits = { maxSteps: 256, maxInputs: 64 } as const;

/** One input of a step: an artifact of a step it needs, by name or by glob. */
export interface StepInputSpec {
  readonly step: string;
  readonly name: string;
  readonly glob: string;
  /** Runs without it when it matches nothing; otherwise that fails the step (missing_input). */
  readonly optional?: boolean;
}

/** The graph part of a step. */
export interface StepNode {
  readonly name: string;
  readonly needs: readonly string[];
  readonly inputs: readonly StepInputSpec[];
}

const stepName = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;

/**
 * Checks a step graph; throws invalid_argument naming the cause: no steps,
 * too many, a bad or repeated name, an unknown step in needs or inputs, an
 * input from a step not (transitively) needed, or a cycle, named in order
 * ("a → b → a").
 */
export function checkGraph(steps: readonly StepNode[]): void {
  if (steps.length === 0) bad("steps is empty: a pipeline needs at least one step");
  if (steps.length > pipelineLimits.maxSteps)
    bad(`the pipeline has ${steps.length} steps; at most ${pipelineLimits.maxSteps} are allowed`);
  const byName = new Map<string, StepNode>();
  steps.forEach((s, i) => {
    if (!stepName.test(s.name))
      bad(
        `steps[${i}].name ${JSON.stringify(s.name.slice(0, 80))} is not a step ` +
          `name: 1 to 63 characters of A-Z a-z 0-9 . _ -, starting with a letter ` +
          `or digit`,
      );
    if (byName.has(s.name))
      bad(
        `steps[${i}].name ${JSON.stringify(s.name)} is a duplicate: step names are unique in a pipeline`,
      );
    byName.set(s.name, s);
  });
  steps.forEach((s, i) => {
    s.needs.forEach((n, j) => {
      if (!byName.has(n))
        bad(
          `steps[${i}] (${s.name}) needs[${j}] names unknown step ${JSON.stringify(n.slice(0, 80))}`,
        );
      if (n === s.name) bad(`steps[${i}] (${s.name}) needs itself: cycle ${s.name} → ${s.name}`);
    });
  });
  const cycle = findCycle(steps, byName);
  if (cycle)
    bad(
      `the steps form a cycle: ${cycle.join(" → ")} (each needs the next); a step cannot (transitively) need itself`,
    );
  steps.forEach((s, i) => {
    if (s.inputs.length > pipelineLimits.maxInputs)
      bad(
        `steps[${i}] (${s.name}) has ${s.inputs.length} inputs; at most ${pipelineLimits.maxInputs} are allowed`,
      );
    const upstream = ancestors(s.name, byName);
    s.inputs.forEach((input, j) => {
      const at = `steps[${i}] (${s.name}) inputs[${j}]`;
      if (!byName.has(input.step))
        bad(`${at} names unknown step ${JSON.stringify(input.step.slice(0, 80))}`);
      if (!upstream.has(input.step))
        bad(
          `${at} is from step ${JSON.stringify(input.step)}, which ${s.name} does ` +
            `not need (directly or through its needs); add it to needs`,
        );
      if (!input.name === !input.glob)
        bad(`${at} needs exactly one of name (an artifact's name) or glob (e.g. "dist/**")`);
      // A name or glob follows the artifact names' rules: relative, no ".." segment, nothing
      // hidden.
      const field = input.name ? "name" : "glob";
      const problem = artifactNameProblem(input.name || input.glob);
      if (problem)
        bad(`${at}.${field} ${JSON.stringify((input.name || input.glob).slice(0, 80))} ${problem}`);
    });
  });
}

/** Every step `name` needs, directly or through its needs. */
function ancestors(name: string, byName: ReadonlyMap<string, StepNode>): Set<string> {
  const seen = new Set<string>();
  const stack = [...(byName.get(name)?.needs ?? [])];
  while (stack.length) {
    const n = stack.pop()!;
    if (seen.has(n)) continue;
    seen.add(n);
    stack.push(...(byName.get(n)?.needs ?? []));
  }
  return seen;
}

/** `name` and every step that needs it, directly or through others. */
export function downstream(name: string, steps: readonly StepNode[]): Set<string> {
  const out = new Set([name]);
  for (let grew = true; grew;) {
    grew = false;
    for (const s of steps) {
      if (out.has(s.name) || !s.needs.some((n) => out.has(n))) continue;
      out.add(s.name);
      grew = true;
    }
  }
  return out;
}

/**
 * A cycle as its steps in order, first repeated at the end; undefined when there is none
 * (depth-first, colouring).
 */
function findCycle(
  steps: readonly StepNode[],
  byName: ReadonlyMap<string, StepNode>,
): string[] | undefined {
  const colour = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (name: string): string[] | undefined => {
    colour.set(name, "open");
    path.push(name);
    for (const n of byName.get(name)!.needs) {
      if (colour.get(n) === "open") return [...path.slice(path.indexOf(n)), n];
      if (!colour.has(n)) {
        const found = visit(n);
        if (found) return found;
      }
    }
    path.pop();
    colour.set(name, "done");
    return undefined;
  };
  for (const s of steps) {
    if (colour.has(s.name)) continue;
    const found = visit(s.name);
    if (found) return found;
  }
  return undefined;
}
