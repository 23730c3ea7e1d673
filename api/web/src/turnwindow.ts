// Windowed rendering of a session's transcript: the page holds the last
// WINDOW turn blocks, and earlier ones as the human scrolls up to them, so
// the browser lays out the same amount of transcript on each change however
// long the session is.
import type { RefObject } from "preact";
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import type { Block } from "./transcript";

/** WINDOW is how many turn blocks the page shows at first, and how many
 * more each step up shows. Thirty turns are many screens of conversation
 * (a turn block is at least a message and an answer), so a human reading
 * the recent exchange rarely needs a step, while the layout a change costs
 * stays that of thirty blocks instead of growing with the session. */
export const WINDOW = 30;

/** TurnWindow is the part of the transcript on the page. */
export interface TurnWindow {
  /** shown are the blocks on the page, in order. */
  shown: Block[];
  /** hidden counts the blocks before shown. */
  hidden: number;
  /** earlier shows up to WINDOW more blocks above, keeping the block at
   * the top of the shown ones where it is on the screen. */
  earlier: () => void;
  /** list is the element that holds the blocks' elements. */
  list: RefObject<HTMLOListElement | null>;
  /** top is the element above the blocks: once the human scrolls it into
   * view, the earlier blocks are shown. */
  top: RefObject<HTMLDivElement | null>;
  /** follow is true while the page is scrolled to end (the element end):
   * the page then keeps its end in view as the transcript grows. */
  follow: RefObject<boolean>;
}

/** useTurnWindow windows blocks, the blocks of session's transcript.
 * While the human follows the end, a new turn slides the window down (the
 * blocks above leave the page); once they scroll up, the window stays put
 * until they come back to the end. */
export function useTurnWindow(session: string, blocks: Block[], end: RefObject<HTMLElement | null>): TurnWindow {
  const [, setTick] = useState(0);
  const list = useRef<HTMLOListElement>(null);
  const top = useRef<HTMLDivElement>(null);
  const follow = useRef(true);
  // from is the first shown turn once the human asked for earlier ones.
  const from = useRef<{ session: string; turn: string } | undefined>(undefined);
  const count = useRef(0);
  const anchor = useRef<{ el: Element; top: number } | undefined>(undefined);

  if (from.current && from.current.session !== session) from.current = undefined;
  let start = from.current ? blocks.findIndex((b) => b.turn.id === from.current!.turn) : -1;
  if (start >= 0 && follow.current && blocks.length > count.current && blocks.length - start > WINDOW) {
    start = -1; // a new turn while the end is in view: back to the window
    from.current = undefined;
  }
  if (start < 0) start = Math.max(0, blocks.length - WINDOW);
  count.current = blocks.length;

  const earlier = () => {
    if (start === 0) return;
    const first = list.current?.querySelector(":scope > .turn-block");
    if (first) anchor.current = { el: first, top: first.getBoundingClientRect().top };
    from.current = { session, turn: blocks[Math.max(0, start - WINDOW)].turn.id };
    setTick((n) => n + 1);
  };
  const latest = useRef(earlier);
  latest.current = earlier;

  // The block that was at the top stays where it was on the screen.
  useLayoutEffect(() => {
    const a = anchor.current;
    if (!a) return;
    anchor.current = undefined;
    if (a.el.isConnected) window.scrollBy(0, a.el.getBoundingClientRect().top - a.top);
  });

  // The human leaves the end by scrolling up; the browser moving the page
  // down (keeping what is on the screen in place as content above it
  // changes) is not the human leaving it.
  useEffect(() => {
    let y = window.scrollY;
    const onScroll = () => {
      const el = end.current;
      const atEnd = !el || el.getBoundingClientRect().bottom <= window.innerHeight + 4;
      if (atEnd) follow.current = true;
      else if (window.scrollY < y - 1) follow.current = false;
      y = window.scrollY;
    };
    window.addEventListener("scroll", onScroll, { passive: true });
    return () => window.removeEventListener("scroll", onScroll);
  }, []);

  const hidden = start;
  useEffect(() => {
    const el = top.current;
    if (!el || hidden === 0) return;
    const io = new IntersectionObserver((seen) => !follow.current && seen.some((e) => e.isIntersecting) && latest.current(), { rootMargin: "200px 0px 0px 0px" });
    io.observe(el);
    return () => io.disconnect();
  }, [hidden === 0]);

  return { shown: blocks.slice(start), hidden, earlier, list, top, follow };
}
