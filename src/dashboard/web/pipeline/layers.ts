// A step graph in layers: a step's depth is one more than the deepest step it needs (steps without
// needs are at depth 0), so every `needs` edge points from an earlier column to a later one. The
// control plane refuses a cycle at submit; a need on no known step counts as depth 0 here.

/** The part of a step the layout reads. */
export interface StepNode {
  readonly name: string;
  readonly needs: readonly string[];
}

/** The steps by depth: layers[0] the steps without needs, in submission order within a layer. */
export function layersOf<S extends StepNode>(steps: readonly S[]): S[][] {
  const byName = new Map(steps.map((s) => [s.name, s]));
  const depth = new Map<string, number>();
  const depthOf = (s: S, seen: ReadonlySet<string>): number => {
    const known = depth.get(s.name);
    if (known !== undefined) return known;
    let d = 0;
    for (const n of s.needs) {
      const need = byName.get(n);
      if (need && !seen.has(n)) d = Math.max(d, depthOf(need, new Set([...seen, s.name])) + 1);
    }
    depth.set(s.name, d);
    return d;
  };
  const layers: S[][] = [];
  for (const s of steps) (layers[depthOf(s, new Set([s.name]))] ??= []).push(s);
  return layers.filter((l) => l !== undefined);
}
