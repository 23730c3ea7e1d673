// The transcript of a planner session, folded from its outputs (SPEC §8).

export interface Output {
  session: string;
  turn: string;
  type: string;
  cursor?: number;
  text?: string;
  tool?: string;
  tool_use_id?: string;
  input?: unknown;
  is_error?: boolean;
  seq?: number;
  position?: number;
  role?: string;
  content?: { type: string; text?: string; tool_use_id?: string; name?: string }[];
  /** A text output's attempt and place in its round's text (bytes of
   * UTF-8): the text ends at text_end of the round after cursor text_after. */
  attempt?: number;
  text_after?: number;
  text_end?: number;
}

/** Round is the running round's text as placed so far. */
interface Round {
  turn: string;
  after: number;
  attempt: number;
  bytes: Uint8Array;
}

const utf8 = new TextEncoder();
const fromUTF8 = new TextDecoder();

export type Entry =
  | { kind: "user"; key: string; turn: string; text: string }
  | { kind: "assistant"; key: string; turn: string; text: string; live: boolean }
  | {
      kind: "tool";
      key: string;
      turn: string;
      id: string;
      name: string;
      input: unknown;
      result?: string;
      isError?: boolean;
      /** ended is set when the turn ended before the call had a result. */
      ended?: string;
    }
  | { kind: "compacted"; key: string; turn: string; upTo: number }
  | { kind: "error"; key: string; turn: string; text: string }
  | { kind: "done"; key: string; turn: string; reason: string };

export type TurnState = "queued" | "running" | "done";

export interface Turn {
  id: string;
  state: TurnState;
  order: number;
  reason?: string;
  /** text is the human's message the turn answers. */
  text?: string;
}

/** Block is one turn with its entries: the human's message, then what the
 * planner did and said. */
export interface Block {
  turn: Turn;
  entries: Entry[];
}

/** Transcript folds outputs. Entries are immutable: a change to one is a
 * new object in a new array, and the others keep their identity, so the
 * view redraws only what changed however long the session is. */
export class Transcript {
  entries: Entry[] = [];
  turns = new Map<string, Turn>();
  cursor = 0;
  /** round is the running round's text, stitched from text outputs by
   * attempt and offset: a stale worker's or a repeated delta is dropped,
   * a newer attempt starts the text over, a resume snapshot is placed. */
  private round: Round | undefined;
  private order = 0;

  /** resumed is called when the watch starts again from the last cursor:
   * the text outputs that follow place themselves, nothing to do. */
  resumed() {}

  /** place puts a text output in the running round and returns the
   * round's text, or undefined when the output is dropped. */
  private place(o: Output): string | undefined {
    const text = utf8.encode(o.text ?? "");
    const after = o.text_after ?? 0;
    const attempt = o.attempt ?? 0;
    let r = this.round;
    if (r && r.turn === o.turn && after < r.after) return undefined; // a round that is over
    if (!r || r.turn !== o.turn || after > r.after) {
      r = this.round = { turn: o.turn, after, attempt, bytes: new Uint8Array() };
    } else if (attempt < r.attempt) {
      return undefined; // a worker that lost its lease
    } else if (attempt > r.attempt) {
      r.attempt = attempt; // another worker, or the model called again: the text starts over
      r.bytes = new Uint8Array();
    }
    const end = o.text_end ?? 0;
    const start = end - text.length;
    const have = r.bytes.length;
    if (end <= have || start > have || start < 0) return undefined; // held already, or past a gap
    const next = new Uint8Array(end);
    next.set(r.bytes);
    next.set(text.subarray(have - start), have);
    r.bytes = next;
    return fromUTF8.decode(next);
  }

  /** turn is a turn by id, made when first seen: queued when its queued
   * output comes first (a replay from the start), else running. */
  private turn(id: string, first: TurnState = "running"): Turn {
    let t = this.turns.get(id);
    if (!t) {
      t = { id, state: first, order: this.order++ };
      this.turns.set(id, t);
    }
    return t;
  }

  /** liveAt is the index of the turn's streaming answer when it is the
   * turn's last entry, else -1. */
  private liveAt(turn: string): number {
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const e = this.entries[i];
      if (e.turn !== turn) continue;
      return e.kind === "assistant" && e.live ? i : -1;
    }
    return -1;
  }

  /** live is the turn's streaming answer when it is the turn's last entry. */
  private live(turn: string): Extract<Entry, { kind: "assistant" }> | undefined {
    const i = this.liveAt(turn);
    return i < 0 ? undefined : (this.entries[i] as Extract<Entry, { kind: "assistant" }>);
  }

  /** replace puts a changed copy of the entry at i: an entry is never
   * changed in place, so the view redraws exactly the entries that are new
   * objects. */
  private replace(i: number, e: Entry) {
    const next = [...this.entries];
    next[i] = e;
    this.entries = next;
  }

  /** dropLive removes a turn's streaming text: its stored message has it. */
  private dropLive(turn: string) {
    this.entries = this.entries.filter((e) => !(e.kind === "assistant" && e.live && e.turn === turn));
  }

  apply(o: Output) {
    if (o.cursor != null) {
      if (o.cursor <= this.cursor) return; // already seen
      this.cursor = o.cursor;
      if (this.round?.turn === o.turn) {
        // The round is over: the turn's next one follows this output.
        this.round = { turn: o.turn, after: o.cursor, attempt: 0, bytes: new Uint8Array() };
      }
    }
    const key = o.cursor != null ? "c" + o.cursor : "t" + this.entries.length;
    if (o.type !== "queued") this.turn(o.turn);
    switch (o.type) {
      case "queued": {
        const t = this.turn(o.turn, "queued");
        const text = (o.content ?? []).filter((b) => b.type === "text").map((b) => b.text ?? "").join("\n\n");
        if (text && t.text === undefined) {
          t.text = text;
          this.entries = [...this.entries, { kind: "user", key, turn: o.turn, text }];
        }
        break;
      }
      case "started":
        this.turn(o.turn).state = "running";
        break;
      case "text": {
        let text: string | undefined;
        if (o.text_end == null) {
          // No place known (the server lost its running text): it follows.
          text = (this.live(o.turn)?.text ?? "") + (o.text ?? "");
        } else {
          text = this.place(o);
        }
        if (text === undefined) break;
        const at = this.liveAt(o.turn);
        if (at >= 0) {
          this.replace(at, { ...(this.entries[at] as Extract<Entry, { kind: "assistant" }>), text });
        } else if (text !== "") {
          this.entries = [...this.entries, { kind: "assistant", key: "live-" + key, turn: o.turn, text, live: true }];
        }
        break;
      }
      case "message": {
        const text = (o.content ?? []).filter((b) => b.type === "text").map((b) => b.text ?? "").join("\n\n");
        if (o.role === "assistant") {
          this.dropLive(o.turn);
          if (text) this.entries = [...this.entries, { kind: "assistant", key, turn: o.turn, text, live: false }];
        } else if (text && this.turns.get(o.turn)?.text === undefined) {
          // A human's message the turn's queued output did not carry.
          this.turn(o.turn).text = text;
          this.entries = [...this.entries, { kind: "user", key, turn: o.turn, text }];
        }
        break;
      }
      case "tool_call": {
        const at = this.liveAt(o.turn);
        if (at >= 0) this.replace(at, { ...(this.entries[at] as Extract<Entry, { kind: "assistant" }>), live: false });
        this.entries = [
          ...this.entries,
          { kind: "tool", key, turn: o.turn, id: o.tool_use_id ?? "", name: o.tool ?? "", input: o.input },
        ];
        break;
      }
      case "tool_result":
        this.entries = this.entries.map((e) =>
          e.kind === "tool" && e.id === o.tool_use_id ? { ...e, result: o.text ?? "", isError: !!o.is_error } : e,
        );
        break;
      case "compacted":
        this.entries = [...this.entries, { kind: "compacted", key, turn: o.turn, upTo: o.seq ?? 0 }];
        break;
      case "error":
        this.entries = [...this.entries, { kind: "error", key, turn: o.turn, text: o.text ?? "error" }];
        break;
      case "done": {
        const t = this.turn(o.turn);
        t.state = "done";
        t.reason = o.text;
        // Streamed text left over when the turn ends is kept only when no
        // stored message of the turn holds it already (a delta that
        // reached the socket after its message).
        const stored = this.entries.filter((e) => e.kind === "assistant" && !e.live && e.turn === o.turn).map((e) => (e as { text: string }).text);
        // A tool call left without a result ended with the turn: it is no
        // longer running.
        const reason = o.text || "ended";
        this.entries = this.entries.flatMap((e): Entry[] => {
          if (e.turn !== o.turn) return [e];
          if (e.kind === "tool" && e.result === undefined) return [{ ...e, ended: reason }];
          if (e.kind !== "assistant" || !e.live) return [e];
          return stored.some((t) => t.includes(e.text.trim())) ? [] : [{ ...e, live: false }];
        });
        if (o.text && o.text !== "end_turn") {
          this.entries = [...this.entries, { kind: "done", key, turn: o.turn, reason: o.text }];
        }
        break;
      }
    }
  }

  /** blocks groups the entries by turn, in the order the turns were first
   * seen (queued): a message queued while another turn runs, and what
   * happens to it, stay out of the running turn's answer. */
  blocks(): Block[] {
    const by = new Map<string, Entry[]>();
    for (const e of this.entries) {
      let list = by.get(e.turn);
      if (!list) by.set(e.turn, (list = []));
      list.push(e);
    }
    return [...this.turns.values()]
      .sort((a, b) => a.order - b.order)
      .filter((t) => by.has(t.id))
      .map((t) => ({ turn: t, entries: by.get(t.id)! }));
  }

  /** active lists the turns not yet done, in order: the running one first. */
  active(): Turn[] {
    return [...this.turns.values()].filter((t) => t.state !== "done").sort((a, b) => a.order - b.order);
  }
}
