import type { HclBody } from './hcl.js';
import type { SourceIndex } from './source-index.js';

/** One block as written: `client "webapp" { ... }` has type client, label webapp. */
export interface BlockInstance {
  readonly type: string;
  readonly label?: string;
  /** How messages name it: `client "webapp"`, or `tls`. */
  readonly name: string;
  /** Its entry in the source index, for line numbers. */
  readonly entry: number | undefined;
  readonly body: HclBody;
}

/** A complaint and where it points: a block (by name), its source entry, and optionally one attribute in it. */
export interface PlacedMessage {
  readonly block?: string;
  readonly entry?: number;
  readonly attribute?: string;
  readonly message: string;
}

export const SINGLE_BLOCKS = ['tls', 'state'] as const;
export const LABELED_BLOCKS = ['user', 'federation', 'client'] as const;

export type SingleBlockType = (typeof SINGLE_BLOCKS)[number];
export type LabeledBlockType = (typeof LABELED_BLOCKS)[number];

export interface TopLevel {
  /** Everything that is not one of the known blocks, for the attribute schema. */
  readonly attributes: HclBody;
  readonly single: Partial<Record<SingleBlockType, BlockInstance>>;
  readonly labeled: Record<LabeledBlockType, BlockInstance[]>;
}

const EXAMPLE_LABEL: Record<LabeledBlockType, string> = { user: 'alice', federation: 'campus', client: 'webapp' };

const isSingle = (key: string): key is SingleBlockType => (SINGLE_BLOCKS as readonly string[]).includes(key);
const isLabeled = (key: string): key is LabeledBlockType => (LABELED_BLOCKS as readonly string[]).includes(key);
const isBody = (value: unknown): value is HclBody => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Splits hcl2json's top-level object into attributes and block instances, reporting misshapen blocks. */
export function splitTopLevel(body: HclBody, index: SourceIndex, report: (message: PlacedMessage) => void): TopLevel {
  const attributes: HclBody = {};
  const single: Partial<Record<SingleBlockType, BlockInstance>> = {};
  const labeled: Record<LabeledBlockType, BlockInstance[]> = { user: [], federation: [], client: [] };

  for (const [key, value] of Object.entries(body)) {
    if (isSingle(key)) {
      const instance = singleBlock(key, value, index, report);
      if (instance) single[key] = instance;
    } else if (isLabeled(key)) {
      labeled[key] = labeledBlocks(key, value, index, report);
    } else {
      attributes[key] = value;
    }
  }
  return { attributes, single, labeled };
}

function singleBlock(
  type: SingleBlockType,
  value: unknown,
  index: SourceIndex,
  report: (message: PlacedMessage) => void,
): BlockInstance | undefined {
  const written = index.child(undefined, type);
  const entry = written ? index.entries.indexOf(written) : undefined;
  if (!Array.isArray(value) || !value.every(isBody)) {
    const message =
      written?.kind === 'block' ? `the ${type} block takes no label; write ${type} { ... }` : `${type} must be a block: ${type} { ... }, not ${type} = ...`;
    report({ entry, message });
    return undefined;
  }
  value.slice(1).forEach((_, i) => {
    const repeat = index.block(undefined, type, [], i + 1);
    report({ block: type, entry: repeat, message: `appears more than once${lineNote(index, entry)}; keep one ${type} block` });
  });
  const first = value[0];
  return first ? { type, name: type, entry: index.block(undefined, type, []), body: first } : undefined;
}

function labeledBlocks(
  type: LabeledBlockType,
  value: unknown,
  index: SourceIndex,
  report: (message: PlacedMessage) => void,
): BlockInstance[] {
  const written = index.child(undefined, type);
  const entry = written ? index.entries.indexOf(written) : undefined;
  const labelHint = `write ${type} "${EXAMPLE_LABEL[type]}" { ... }`;
  if (Array.isArray(value)) {
    report({ entry, message: `a ${type} block needs one label; ${labelHint}` });
    return [];
  }
  if (!isBody(value)) {
    report({ entry, message: `${type} must be a block; ${labelHint}` });
    return [];
  }
  const instances: BlockInstance[] = [];
  for (const [label, bodies] of Object.entries(value)) {
    const name = `${type} ${JSON.stringify(label)}`;
    const first = index.block(undefined, type, [label]);
    if (!Array.isArray(bodies) || !bodies.every(isBody)) {
      const asBlock = index.entries.find((e) => e.kind === 'block' && e.parent === undefined && e.name === type && e.labels[0] === label);
      const message = asBlock ? `a ${type} block takes exactly one label; ${labelHint}` : `${type} must be a block; ${labelHint}`;
      report({ entry: asBlock ? index.entries.indexOf(asBlock) : entry, message });
      continue;
    }
    bodies.slice(1).forEach((_, i) => {
      const repeat = index.block(undefined, type, [label], i + 1);
      report({ block: name, entry: repeat, message: `is defined more than once${lineNote(index, first)}; ${type} labels must be unique` });
    });
    const body = bodies[0];
    if (body) instances.push({ type, label, name, entry: first, body });
  }
  // hcl2json sorts labels; config order is what a reader expects back (e.g. in `pinpoint check`).
  return instances.sort((a, b) => (a.entry ?? Infinity) - (b.entry ?? Infinity));
}

function lineNote(index: SourceIndex, firstEntry: number | undefined): string {
  const line = index.line(firstEntry);
  return line === undefined ? '' : ` (first at line ${line})`;
}
