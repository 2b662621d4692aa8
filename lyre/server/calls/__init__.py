"""Calls: the voice agent with its audio as media, not JSON. A WebRTC call (``/v1/realtime/calls``) and a phone
call through Twilio's Media Streams share `voice_call`; each transport keeps its own files."""
