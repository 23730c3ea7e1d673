// A small history router: paths are the app's pages; the api answers every
// unknown path with index.html.
import { useEffect, useState } from "preact/hooks";
import type { ComponentChildren } from "preact";

const listeners = new Set<() => void>();

export function navigate(path: string) {
  history.pushState(null, "", path);
  listeners.forEach((l) => l());
}

window.addEventListener("popstate", () => listeners.forEach((l) => l()));

export function usePath(): string {
  const [path, setPath] = useState(location.pathname + location.search);
  useEffect(() => {
    const l = () => setPath(location.pathname + location.search);
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
  return path;
}

export function Link(props: { href: string; class?: string; children: ComponentChildren; "aria-current"?: "page" }) {
  return (
    <a
      href={props.href}
      class={props.class}
      aria-current={props["aria-current"]}
      onClick={(e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        navigate(props.href);
      }}
    >
      {props.children}
    </a>
  );
}
