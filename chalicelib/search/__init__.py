"""Ranking for the find_tool meta-tool: which published tools match a free-text need.

One module per job, the fusion on top:

  text.py       words: normalising, stop words, the light stemmer, glued names split
  documents.py  Document, and the stored MiniLM vector of a tool (VECTOR_VERSION)
  bm25.py       the keyword and name signals: terms per doc, BM25 worked out at query time
  static.py     the static signal: wordllama's token vectors, range-weighted and pooled
  arrays.py     numpy helpers the signals share
  index.py      SearchIndex: the signals fused (sentence, static, keyword, name) and "no hit"

Parameters were picked on every 10th MetaTool query only (bench/find_tool_quality.py).

Tool vectors cost a forward pass each, so the app computes them once per tool version with
document_vector() and passes them back in Document.vector; building an index from stored
vectors needs no model run at all. Queries are embedded at search time.

A toolbox grows while it is searched, so an index takes changed docs up in place
(SearchIndex.updated, about 25 ms at 10,000 tools against 2 s for a build): the keyword side
keeps each term's raw frequencies and works BM25 out at query time, the sentence side keeps the
vectors and each one's distance from their mean, both exactly as a fresh build would. Only the
static signal's token weights stay as the last full build measured them, until REBUILD_SHARE of
the docs changed.

Nothing is imported here: importers name the module they need (chalicelib.search.index for
SearchIndex, chalicelib.search.documents for Document and the vectors).
"""
