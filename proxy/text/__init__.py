"""Text analysis shared by every place that cuts text into words: name linking, relation relevance,
the keyword index, chunk boundaries, evidence notes, the console's search and the language of a turn.

Unicode throughout; scripts written without spaces (Chinese, Japanese, Thai...) are segmented rather
than taken as one word per clause (``words``)."""
