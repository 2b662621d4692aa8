"""Orpheus's ids and rates: the Llama-3 and Orpheus control tokens, where audio tokens start, a frame's
tokens and samples, the voices and emotion tags of the English finetune."""

__all__ = ["AUDIO_TOKEN_BASE", "BOS", "CODEBOOK_SIZE", "CUSTOM_TOKEN_BASE", "EMOTIVE_TAGS", "END_OF_AI",
           "END_OF_HUMAN", "END_OF_SPEECH", "EOT", "FRAME_SECONDS", "FRAME_TOKENS", "PAD", "SAMPLES_PER_FRAME",
           "SAMPLE_RATE", "START_OF_AI", "START_OF_HUMAN", "START_OF_SPEECH", "STOP_TOKEN", "TOKENS_PER_SECOND",
           "VOICES"]

# Llama-3 special tokens. Every id from BOS up is a control token, never text.
BOS = 128000  # <|begin_of_text|>
EOT = 128009  # <|eot_id|>

# Orpheus adds `<custom_token_N>` with id CUSTOM_TOKEN_BASE + N.
CUSTOM_TOKEN_BASE = 128256
START_OF_SPEECH = 128257  # <custom_token_1>
END_OF_SPEECH = 128258  # <custom_token_2>
START_OF_HUMAN = 128259  # <custom_token_3>
END_OF_HUMAN = 128260  # <custom_token_4>
START_OF_AI = 128261  # <custom_token_5>
END_OF_AI = 128262  # <custom_token_6>
PAD = 128263  # <custom_token_7>
STOP_TOKEN = END_OF_SPEECH
AUDIO_TOKEN_BASE = 128266  # <custom_token_10>: code 0 at frame position 0

CODEBOOK_SIZE = 4096
FRAME_TOKENS = 7
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 2048  # one coarse SNAC frame: 85.33 ms
FRAME_SECONDS = SAMPLES_PER_FRAME / SAMPLE_RATE
# Tokens the model must emit per second of audio to keep up with playback.
TOKENS_PER_SECOND = FRAME_TOKENS * SAMPLE_RATE / SAMPLES_PER_FRAME  # ~82.03

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
EMOTIVE_TAGS = (
    "<laugh>",
    "<chuckle>",
    "<sigh>",
    "<cough>",
    "<sniffle>",
    "<groan>",
    "<yawn>",
    "<gasp>",
)
