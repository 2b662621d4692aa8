"""Small parts that every layer may use and that import nothing else of lyre: the hand-off of results from
worker threads to the event loop, batch shapes, the cache folder and whole-file writes, which device models run
on, API keys on requests, and audio files decoded within a length bound."""
