// Progressive enhancement only: every page works without it.
// Drag and drop onto a .dropzone puts the files into its file input and submits the form.
document.addEventListener("DOMContentLoaded", () => {
  for (const zone of document.querySelectorAll(".dropzone")) {
    const input = zone.querySelector("input[type=file]");
    const form = zone.closest("form");
    if (!input || !form) continue;
    zone.addEventListener("dragover", (event) => { event.preventDefault(); zone.classList.add("over"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("over");
      if (!event.dataTransfer || !event.dataTransfer.files.length) return;
      input.files = event.dataTransfer.files;
      form.requestSubmit();
    });
  }
});

// The playground's answer, streamed as server-sent events: "token" events carry HTML-escaped
// pieces to append, "done" / "error" the final fragment that replaces the whole container.
// (Our own few lines: the SSE extension shipped beside htmx 2.0 is the htmx 1 one.)
function streamAnswers(root) {
  for (const box of root.querySelectorAll("[data-answer-stream]")) {
    const url = box.getAttribute("data-answer-stream");
    box.removeAttribute("data-answer-stream");
    const target = box.querySelector(".answer");
    const source = new EventSource(url);
    source.addEventListener("token", (event) => target.insertAdjacentHTML("beforeend", event.data));
    for (const name of ["done", "error"]) {
      source.addEventListener(name, (event) => { source.close(); box.outerHTML = event.data; });
    }
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED || !box.isConnected) return;
      source.close();
      box.insertAdjacentHTML("beforeend", '<p class="error" role="alert">The answer stream was interrupted.</p>');
    };
  }
}
document.addEventListener("htmx:load", (event) => streamAnswers(event.detail.elt));
document.addEventListener("DOMContentLoaded", () => streamAnswers(document));

// The knowledge-base switcher goes to the chosen base as soon as it is picked (its button does the
// same without JavaScript).
document.addEventListener("change", (event) => {
  const select = event.target.closest && event.target.closest("select[data-switch-on-change]");
  if (select && select.form) select.form.requestSubmit();
});

// A drawing wider than the screen scrolls inside its frame: start with its centre entity in view.
function centreGraphs(root) {
  for (const frame of root.querySelectorAll(".graph-frame")) {
    const centre = frame.querySelector(".node.centre circle");
    if (!centre || frame.scrollWidth <= frame.clientWidth) continue;
    const box = centre.getBoundingClientRect();
    const own = frame.getBoundingClientRect();
    frame.scrollLeft += box.left + box.width / 2 - (own.left + own.width / 2);
  }
}
document.addEventListener("DOMContentLoaded", () => centreGraphs(document));
