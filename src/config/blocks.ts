import { isLabeledBlock, isSingleBlock, type HclBody, type LabeledBlockType, type SingleBlockType } from './block-types.js';
import type { SourceEntry } from './source-index.js';

/** One block as written: `client "webapp" { ... }` has type client, label webapp. */
export interface BlockInstance {
  readonly type: string;
  readonly label?: string;
  /** How messages name it: `client "webapp"`, or `tls`. */
  readonly name: string;
  /** Where it is written, for line numbers. */
  readonly entry: SourceEntry | undefined;
  readonly body: HclBody;
}

/** A complaint and where it points: a block (by name), its source entry, and optionally one attribute in it. */
export interface PlacedMessage {
  readonly block?: string;
  readonly entry?: SourceEntry | undefined;
  readonly attribute?: string;
  readonly message: string;
}

export interface TopLevel {
  /** Everything that is not one of the known blocks, for the attribute schema. */
  readonly attributes: HclBody;
  readonly single: Partial<Record<SingleBlockType, BlockInstance>>;
  readonly labeled: Record<LabeledBlockType, BlockInstance[]>;
}

const EXAMPLE_LABEL: Record<LabeledBlockType, string> = {
  user: 'alice',
  federation: 'campus',
  client: 'webapp',
  resource_server: 'https://api.example.org/',
};

const isBody = (value: unknown): value is HclBody => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Splits hcl2json's top-level object into attributes and block instances, reporting misshapen blocks. */
export function splitTopLevel(body: HclBody, source: readonly SourceEntry[], report: (message: PlacedMessage) => void): TopLevel {
  const attributes: HclBody = {};
  const single: Partial<Record<SingleBlockType, BlockInstance>> = {};
  const labeled: Record<LabeledBlockType, BlockInstance[]> = { user: [], federation: [], client: [], resource_server: [] };

  for (const [key, value] of Object.entries(body)) {
    if (isSingleBlock(key)) {
      const instance = singleBlock(key, value, source, report);
      if (instance) single[key] = instance;
    } else if (isLabeledBlock(key)) {
      labeled[key] = labeledBlocks(key, value, source, report);
    } else {
      attributes[key] = value;
    }
  }
  return { attributes, single, labeled };
}

function singleBlock(
  type: SingleBlockType,
  value: unknown,
  source: readonly SourceEntry[],
  report: (message: PlacedMessage) => void,
): BlockInstance | undefined {
  const written = source.find((entry) => entry.name === type);
  if (!Array.isArray(value) || !value.every(isBody)) {
    const message =
      written?.kind === 'block' ? `the ${type} block takes no label; write ${type} { ... }` : `${type} must be a block: ${type} { ... }, not ${type} = ...`;
    report({ entry: written, message });
    return undefined;
  }
  const blocks = blocksWritten(source, type, []);
  value.slice(1).forEach((_, i) => {
    report({ block: type, entry: blocks[i + 1], message: `appears more than once${lineNote(written)}; keep one ${type} block` });
  });
  const first = value[0];
  return first ? { type, name: type, entry: blocks[0], body: first } : undefined;
}

function labeledBlocks(
  type: LabeledBlockType,
  value: unknown,
  source: readonly SourceEntry[],
  report: (message: PlacedMessage) => void,
): BlockInstance[] {
  const written = source.find((entry) => entry.name === type);
  const labelHint = `write ${type} "${EXAMPLE_LABEL[type]}" { ... }`;
  if (Array.isArray(value)) {
    report({ entry: written, message: `a ${type} block needs one label; ${labelHint}` });
    return [];
  }
  if (!isBody(value)) {
    report({ entry: written, message: `${type} must be a block; ${labelHint}` });
    return [];
  }
  const instances: BlockInstance[] = [];
  for (const [label, bodies] of Object.entries(value)) {
    const name = `${type} ${JSON.stringify(label)}`;
    const blocks = blocksWritten(source, type, [label]);
    if (!Array.isArray(bodies) || !bodies.every(isBody)) {
      const asBlock = source.find((entry) => entry.kind === 'block' && entry.name === type && entry.labels[0] === label);
      const message = asBlock ? `a ${type} block takes exactly one label; ${labelHint}` : `${type} must be a block; ${labelHint}`;
      report({ entry: asBlock ?? written, message });
      continue;
    }
    bodies.slice(1).forEach((_, i) => {
      report({ block: name, entry: blocks[i + 1], message: `is defined more than once${lineNote(blocks[0])}; ${type} labels must be unique` });
    });
    const body = bodies[0];
    if (body) instances.push({ type, label, name, entry: blocks[0], body });
  }
  // hcl2json sorts labels; config order is what a reader expects back (e.g. in `pinpoint check`).
  return instances.sort((a, b) => (a.entry?.line ?? Infinity) - (b.entry?.line ?? Infinity));
}

/** The blocks of this type with exactly these labels, in file order. */
function blocksWritten(source: readonly SourceEntry[], type: string, labels: readonly string[]): SourceEntry[] {
  return source.filter(
    (entry) => entry.kind === 'block' && entry.name === type && entry.labels.length === labels.length && entry.labels.every((label, i) => label === labels[i]),
  );
}

function lineNote(first: SourceEntry | undefined): string {
  return first === undefined ? '' : ` (first at line ${first.line})`;
}
