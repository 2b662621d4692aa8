"""What written text says when spoken: numbers, money, dates, abbreviations and symbols read as words. The text
front end the speech and the word times share (English first; a language's rules in one place)."""
