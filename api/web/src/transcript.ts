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
  | { kind: "tool"; key: string; turn: string; id: string; name: string; input: unknown; result?: string; isError?: boolean }
  | { kind: "compacted"; key: string; upTo: number }
  | { kind: "error"; key: string; text: string }
  | { kind: "done"; key: string; turn: string; reason: string };

export type TurnState = "queued" | "running" | "done";

export interface Turn {
  id: string;
  state: TurnState;
  order: number;
  reason?: string;
}

/** Transcript folds outputs; it is immutable from the view's side: apply
 * returns whether anything changed. */
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

  private turn(id: string): Turn {
    let t = this.turns.get(id);
    if (!t) {
      t = { id, state: "queued", order: this.order++ };
      this.turns.set(id, t);
    }
    return t;
  }

  private live(turn: string): Extract<Entry, { kind: "assistant" }> | undefined {
    const last = this.entries[this.entries.length - 1];
    return last?.kind === "assistant" && last.live && last.turn === turn ? last : undefined;
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
    switch (o.type) {
      case "queued":
        this.turn(o.turn);
        break;
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
        const cur = this.live(o.turn);
        if (cur) {
          cur.text = text;
        } else if (text !== "") {
          this.entries.push({ kind: "assistant", key: "live-" + key, turn: o.turn, text, live: true });
        }
        this.entries = [...this.entries];
        break;
      }
      case "message": {
        const text = (o.content ?? []).filter((b) => b.type === "text").map((b) => b.text ?? "").join("\n\n");
        if (o.role === "assistant") {
          this.dropLive(o.turn);
          if (text) this.entries = [...this.entries, { kind: "assistant", key, turn: o.turn, text, live: false }];
        } else if (text) {
          this.entries = [...this.entries, { kind: "user", key, turn: o.turn, text }];
        }
        break;
      }
      case "tool_call": {
        const cur = this.live(o.turn);
        if (cur) cur.live = false;
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
        this.entries = [...this.entries, { kind: "compacted", key, upTo: o.seq ?? 0 }];
        break;
      case "error":
        this.entries = [...this.entries, { kind: "error", key, text: o.text ?? "error" }];
        break;
      case "done": {
        const t = this.turn(o.turn);
        t.state = "done";
        t.reason = o.text;
        // Streamed text left over when the turn ends is kept only when no
        // stored message of the turn holds it already (a delta that
        // reached the socket after its message).
        const stored = this.entries.filter((e) => e.kind === "assistant" && !e.live && e.turn === o.turn).map((e) => (e as { text: string }).text);
        this.entries = this.entries.flatMap((e) => {
          if (e.kind !== "assistant" || !e.live || e.turn !== o.turn) return [e];
          return stored.some((t) => t.includes(e.text.trim())) ? [] : [{ ...e, live: false }];
        });
        if (o.text && o.text !== "end_turn") {
          this.entries = [...this.entries, { kind: "done", key, turn: o.turn, reason: o.text }];
        }
        break;
      }
    }
  }

  /** active lists the turns not yet done, in order: the running one first. */
  active(): Turn[] {
    return [...this.turns.values()].filter((t) => t.state !== "done").sort((a, b) => a.order - b.order);
  }
}
