/** One attribute or block header as written in the HCL text. */
export interface SourceEntry {
  readonly kind: 'attribute' | 'block';
  readonly name: string;
  readonly labels: readonly string[];
  readonly line: number;
  /** Index of the enclosing block entry; undefined at the top level. */
  readonly parent: number | undefined;
}

/**
 * Where attributes and blocks sit in the text. The HCL parser gives values but no positions, so
 * this scanner walks the (already syntax-checked) text and remembers the line of each name.
 */
export class SourceIndex {
  readonly entries: readonly SourceEntry[];

  constructor(text: string) {
    this.entries = scanEntries(text);
  }

  /** The `occurrence`-th block (0-based) with this type and labels under `parent`. */
  block(parent: number | undefined, type: string, labels: readonly string[], occurrence = 0): number | undefined {
    let seen = 0;
    for (const [index, entry] of this.entries.entries()) {
      if (entry.kind !== 'block' || entry.parent !== parent || entry.name !== type) continue;
      if (entry.labels.length !== labels.length || entry.labels.some((label, i) => label !== labels[i])) continue;
      if (seen === occurrence) return index;
      seen += 1;
    }
    return undefined;
  }

  /** The first entry (attribute or block) called `name` directly under `parent`. */
  child(parent: number | undefined, name: string): SourceEntry | undefined {
    return this.entries.find((entry) => entry.parent === parent && entry.name === name);
  }

  line(index: number | undefined): number | undefined {
    return index === undefined ? undefined : this.entries[index]?.line;
  }
}

const IDENTIFIER = /[A-Za-z_][A-Za-z0-9_-]*/y;

function scanEntries(text: string): SourceEntry[] {
  const entries: SourceEntry[] = [];
  const lineStarts = [0];
  for (let i = 0; i < text.length; i += 1) if (text[i] === '\n') lineStarts.push(i + 1);
  const lineOf = (position: number): number => {
    let low = 0;
    let high = lineStarts.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if ((lineStarts[middle] as number) <= position) low = middle;
      else high = middle - 1;
    }
    return low + 1;
  };

  let pos = 0;

  const skipTrivia = (crossLines: boolean): void => {
    while (pos < text.length) {
      const c = text[pos];
      if (c === ' ' || c === '\t' || c === '\r' || (crossLines && c === '\n')) pos += 1;
      else if (c === '#' || text.startsWith('//', pos)) skipToLineEnd();
      else if (text.startsWith('/*', pos)) {
        const end = text.indexOf('*/', pos + 2);
        pos = end === -1 ? text.length : end + 2;
      } else return;
    }
  };

  const skipToLineEnd = (): void => {
    const end = text.indexOf('\n', pos);
    pos = end === -1 ? text.length : end;
  };

  const readIdentifier = (): string | undefined => {
    IDENTIFIER.lastIndex = pos;
    const match = IDENTIFIER.exec(text);
    if (!match) return undefined;
    pos += match[0].length;
    return match[0];
  };

  const readQuoted = (): string => {
    const start = pos;
    skipQuoted();
    try {
      return JSON.parse(text.slice(start, pos)) as string;
    } catch {
      return text.slice(start + 1, pos - 1);
    }
  };

  // Positioned on the opening quote; leaves pos after the closing one.
  const skipQuoted = (): void => {
    pos += 1;
    while (pos < text.length) {
      const c = text[pos];
      if (c === '\\') pos += 2;
      else if (c === '"') {
        pos += 1;
        return;
      } else if ((c === '$' || c === '%') && text[pos + 1] === c && text[pos + 2] === '{') pos += 3;
      else if ((c === '$' || c === '%') && text[pos + 1] === '{') {
        pos += 2;
        skipExpression(true);
        pos += 1;
      } else pos += 1;
    }
  };

  const skipHeredoc = (): boolean => {
    const match = /^<<-?([A-Za-z_][A-Za-z0-9_-]*)[ \t]*\r?\n/.exec(text.slice(pos, pos + 200));
    if (!match) return false;
    pos += match[0].length;
    const marker = match[1];
    while (pos < text.length) {
      const end = text.indexOf('\n', pos);
      const lineText = text.slice(pos, end === -1 ? text.length : end);
      pos = end === -1 ? text.length : end;
      if (lineText.trim() === marker) return true;
      if (end !== -1) pos += 1;
    }
    return true;
  };

  // Skips an attribute's value: stops at a newline or an unmatched `}` outside brackets,
  // or, inside a template interpolation, at its closing `}`.
  const skipExpression = (inTemplate: boolean): void => {
    let depth = 0;
    while (pos < text.length) {
      const c = text[pos];
      if (c === '"') skipQuoted();
      else if (c === '#' || text.startsWith('//', pos)) skipToLineEnd();
      else if (text.startsWith('/*', pos)) skipTrivia(false);
      else if (text.startsWith('<<', pos) && skipHeredoc()) continue;
      else if (c === '(' || c === '[' || c === '{') {
        depth += 1;
        pos += 1;
      } else if (c === ')' || c === ']' || c === '}') {
        if (depth === 0) return;
        depth -= 1;
        pos += 1;
      } else if (c === '\n' && depth === 0 && !inTemplate) return;
      else pos += 1;
    }
  };

  const scanBody = (parent: number | undefined): void => {
    for (;;) {
      skipTrivia(true);
      if (pos >= text.length) return;
      if (text[pos] === '}') {
        pos += 1;
        return;
      }
      const start = pos;
      const name = readIdentifier();
      if (name === undefined) {
        pos += 1;
        continue;
      }
      skipTrivia(false);
      if (text[pos] === '=' && text[pos + 1] !== '=') {
        pos += 1;
        entries.push({ kind: 'attribute', name, labels: [], line: lineOf(start), parent });
        skipExpression(false);
        continue;
      }
      const labels: string[] = [];
      for (;;) {
        if (text[pos] === '"') labels.push(readQuoted());
        else {
          const label = readIdentifier();
          if (label === undefined) break;
          labels.push(label);
        }
        skipTrivia(false);
      }
      if (text[pos] !== '{') {
        skipToLineEnd();
        continue;
      }
      pos += 1;
      entries.push({ kind: 'block', name, labels, line: lineOf(start), parent });
      scanBody(entries.length - 1);
    }
  };

  scanBody(undefined);
  return entries;
}
