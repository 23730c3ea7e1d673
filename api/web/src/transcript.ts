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
}

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
  /** resyncing is set on a resume: the next text of a running round is the
   * round's whole text so far, of which some is already shown. */
  private resyncing = false;
  private order = 0;

  resumed() {
    this.resyncing = true;
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

  /** late reports whether a delta belongs to a round whose message is
   * shown already (a delta can reach the socket after its message). */
  private late(turn: string, text: string): boolean {
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const e = this.entries[i];
      if (e.kind === "tool" && e.turn === turn && e.result === undefined) continue;
      return e.kind === "assistant" && !e.live && e.turn === turn && e.text.includes(text);
    }
    return false;
  }

  apply(o: Output) {
    if (o.cursor != null) {
      if (o.cursor <= this.cursor) return; // already seen
      this.cursor = o.cursor;
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
        const text = o.text ?? "";
        const cur = this.live(o.turn);
        if (!cur) {
          if (this.late(o.turn, text)) break;
          this.entries.push({ kind: "assistant", key: "live-" + key, turn: o.turn, text, live: true });
        } else if (this.resyncing && text.startsWith(cur.text)) {
          cur.text = text;
        } else if (this.resyncing && cur.text.startsWith(text)) {
          // all of it is shown already
        } else {
          cur.text += text;
        }
        this.resyncing = false;
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
        this.resyncing = false;
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
        this.resyncing = false;
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
