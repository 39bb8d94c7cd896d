/** A config body as hcl2-parser returns it: hcl2json's object shape. */
export type HclBody = Record<string, unknown>;

/** Top-level blocks written once, without a label: `tls { ... }`. */
export const SINGLE_BLOCKS = ['tls', 'state', 'limits', 'metrics', 'dynamic_clients'] as const;
/** Top-level blocks written with one label, the name: `client "webapp" { ... }`. */
export const LABELED_BLOCKS = ['user', 'federation', 'client', 'resource_server'] as const;

export type SingleBlockType = (typeof SINGLE_BLOCKS)[number];
export type LabeledBlockType = (typeof LABELED_BLOCKS)[number];

export const isSingleBlock = (type: string): type is SingleBlockType => (SINGLE_BLOCKS as readonly string[]).includes(type);
export const isLabeledBlock = (type: string): type is LabeledBlockType => (LABELED_BLOCKS as readonly string[]).includes(type);
