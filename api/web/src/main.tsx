// Ballet Planner in the browser: sign in, then projects, sessions,
// changesets, the board and usage.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ApiError, get, setToken, token } from "./api";
import { closeSocket } from "./rpcclient";
import { Link, navigate, usePath } from "./router";
import { ProjectsPage, SessionsPage } from "./pages/Projects";
import { SessionPage } from "./pages/Session";
import { ChangesetsPage } from "./pages/Changesets";
import { BoardPage } from "./pages/Board";
import { UsagePage } from "./pages/Usage";
import { KnowledgePage } from "./pages/Knowledge";
import "./style.css";

type Auth = "checking" | "signed-in" | "local" | "signed-out";

/** localMode reports whether the server said, in the page, that it runs
 * in auth.mode local (api/web.go). */
const localMode = () => document.querySelector('meta[name="ballet-auth"]')?.getAttribute("content") === "local";

function SignIn(props: { done: () => void; error: string }) {
  const [t, setT] = useState("");
  return (
    <main class="signin">
      <h1>Ballet Planner</h1>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          setToken(t.trim());
          props.done();
        }}
      >
        <label for="token">API token</label>
        <input id="token" type="password" autocomplete="off" placeholder="blt_…" value={t} onInput={(e) => setT((e.target as HTMLInputElement).value)} autofocus />
        <button type="submit" class="primary">Sign in</button>
        {props.error && <p class="error" role="alert">{props.error}</p>}
        <p class="meta">The token stays in this tab only (session storage). `make run` prints the demo token.</p>
      </form>
    </main>
  );
}

function route(path: string, query: URLSearchParams) {
  let m: RegExpMatchArray | null;
  if ((m = path.match(/^\/projects\/([^/]+)\/sessions\/([^/]+)$/))) return { project: m[1], el: <SessionPage project={m[1]} id={m[2]} /> };
  if ((m = path.match(/^\/projects\/([^/]+)\/changesets$/)))
    return { project: m[1], el: <ChangesetsPage project={m[1]} status={query.get("status") ?? "proposed"} /> };
  if ((m = path.match(/^\/projects\/([^/]+)\/board$/))) return { project: m[1], el: <BoardPage project={m[1]} item={query.get("item") ?? ""} /> };
  if ((m = path.match(/^\/projects\/([^/]+)\/usage$/))) return { project: m[1], el: <UsagePage project={m[1]} /> };
  if ((m = path.match(/^\/projects\/([^/]+)(\/sessions)?$/))) return { project: m[1], el: <SessionsPage project={m[1]} /> };
  if ((m = path.match(/^\/orgs\/([^/]+)\/knowledge$/))) return { el: <KnowledgePage org={m[1]} /> };
  if (path === "/" || path === "/projects") return { el: <ProjectsPage /> };
  return { el: <p class="empty">No such page. <Link href="/">Projects</Link></p> };
}

function App() {
  const full = usePath();
  const path = full.split("?")[0];
  const [auth, setAuth] = useState<Auth>("checking");
  const [error, setError] = useState("");
  const check = () => {
    // Without a token, only a server in local mode lets the app in: it
    // says so in the page, and the api is asked nothing otherwise.
    if (!token() && !localMode()) {
      setError("");
      setAuth("signed-out");
      return;
    }
    setAuth("checking");
    get("/organizations").then(
      () => setAuth(token() ? "signed-in" : "local"),
      (e) => {
        // Whether a token was tried is read before it is cleared.
        const tried = token() !== "";
        setToken("");
        if (!tried) setError("");
        else if (e instanceof ApiError && e.status === 401) setError("That token was not accepted.");
        else setError(`Could not sign in: ${e instanceof Error ? e.message : String(e)}`);
        setAuth("signed-out");
      },
    );
  };
  useEffect(check, []);
  if (auth === "checking")
    return (
      <main>
        <p class="empty">Loading…</p>
      </main>
    );
  if (auth === "signed-out") return <SignIn done={check} error={error} />;
  const r = route(decodeURI(path), new URLSearchParams(location.search));
  const tab = (href: string, label: string) => (
    <Link href={href} aria-current={path === href || (label === "Sessions" && path.startsWith(href + "/sessions")) ? "page" : undefined}>
      {label}
    </Link>
  );
  return (
    <>
      <header class="top">
        <Link href="/" class="brand">Ballet Planner</Link>
        {r.project && (
          <nav aria-label="Project">
            <code>{r.project}</code>
            {tab(`/projects/${r.project}`, "Sessions")}
            {tab(`/projects/${r.project}/changesets`, "Changesets")}
            {tab(`/projects/${r.project}/board`, "Board")}
            {tab(`/projects/${r.project}/usage`, "Usage")}
          </nav>
        )}
        <span class="spacer" />
        {auth === "local" ? (
          <span class="meta">local mode</span>
        ) : (
          <button
            class="link"
            onClick={() => {
              setToken("");
              closeSocket();
              navigate("/");
              setAuth("signed-out");
            }}
          >
            Sign out
          </button>
        )}
      </header>
      <main key={full}>{r.el}</main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
