// unichunk /ui: the little the pages need beyond HTML. Clicking a chunk in the list marks its text; the
// highlighted hit scrolls into view, and the chunk list to the hit's chunk. Reads only the page's own
// elements; loads nothing.
document.addEventListener("DOMContentLoaded", () => {
  const hit = document.getElementById("hit");
  if (hit) hit.scrollIntoView({block: "center"});
  const list = document.querySelector(".chunks");
  const focused = document.querySelector(".chunk-item.focus");
  // the list alone scrolls (beside the text); on a phone it is under the text and does not scroll itself
  if (list && focused && list.scrollHeight > list.clientHeight) {
    const below = focused.getBoundingClientRect().top - list.getBoundingClientRect().top;
    list.scrollTop += below - list.clientHeight / 3;
  }
  for (const item of document.querySelectorAll(".chunk-item")) {
    item.addEventListener("click", () => {
      const n = item.dataset.chunk;
      for (const other of document.querySelectorAll(".chunk-item.focus")) other.classList.remove("focus");
      for (const seg of document.querySelectorAll(".seg.focus")) seg.classList.remove("focus");
      item.classList.add("focus");
      let first = null;
      for (const seg of document.querySelectorAll(".seg[data-chunks]")) {
        if (seg.dataset.chunks.split(" ").includes(n)) {
          seg.classList.add("focus");
          first = first || seg;
        }
      }
      if (first) first.scrollIntoView({block: "center"});
    });
  }
});
