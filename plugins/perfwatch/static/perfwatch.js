/* perfwatch's pages (served by the plugin: /perfwatch/assets/perfwatch.js).
   Airflow frames the pages in its plugin view (a sandboxed iframe that may not navigate Airflow's window).
   Inside that frame a link to Airflow's own UI (class "airflow": a DAG run, a task log) asks Airflow's router to
   show it (history.pushState + popstate in Airflow's window, same origin) instead of opening Airflow inside
   the frame; where that is not possible the link opens in the frame as a plain link. Outside the frame the
   header shows "open inside Airflow". */
(function () {
  var framed = false, topWin = null;
  try {
    framed = window.self !== window.top;
    topWin = window.top;
    void topWin.location.pathname; /* throws when Airflow's window is not ours to read */
  } catch (e) {
    topWin = null;
  }
  document.documentElement.classList.add(framed ? "framed" : "unframed");
  document.addEventListener("click", function (ev) {
    var a = ev.target && ev.target.closest ? ev.target.closest("a.airflow") : null;
    if (!a || !framed || !topWin || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    try {
      var url = new URL(a.href, window.location.href);
      if (url.origin !== topWin.location.origin) return;
      topWin.history.pushState(null, "", url.pathname + url.search + url.hash);
      topWin.dispatchEvent(new PopStateEvent("popstate", { state: null }));
      ev.preventDefault();
    } catch (e) {
      /* a plain link then */
    }
  });
})();
