// Shared view pieces.
import { useEffect, useMemo, useState } from "preact/hooks";
import { renderMarkdown } from "./markdown";

/** Markdown renders sanitized Markdown, again only when src changes. */
export function Markdown(props: { src: string; class?: string }) {
  const html = useMemo(() => renderMarkdown(props.src), [props.src]);
  return <div class={"md " + (props.class ?? "")} dangerouslySetInnerHTML={{ __html: html }} />;
}

/** useLoad runs load and reruns it when deps change or reload is called. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]) {
  const [data, setData] = useState<T>();
  const [error, setError] = useState("");
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (d) => live && (setData(d), setError("")),
      (e) => live && setError(e.message),
    );
    return () => {
      live = false;
    };
  }, [...deps, n]);
  return { data, error, reload: () => setN((x) => x + 1) };
}

export function ErrorLine(props: { error: string }) {
  return props.error ? <div class="error" role="alert">{props.error}</div> : null;
}

export function when(iso: string): string {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}
