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
