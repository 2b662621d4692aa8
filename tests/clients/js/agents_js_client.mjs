// OpenAI's Agents SDK for JavaScript (@openai/agents-realtime) as a real client of lyre's voice agent, over
// its WebSocket transport and on its own defaults: a RealtimeAgent with one zod tool the SDK runs itself,
// a RealtimeSession, and a microphone that streams pcm16 at real time with session.sendAudio.
//
//     node agents_js_client.mjs ws://127.0.0.1:PORT/v1/realtime?model=lyre WEATHER.pcm STORY.pcm BARGE.pcm
//
// Each PCM file is one spoken user turn (24 kHz mono pcm16). The microphone sends silence between them, as
// a real one does. The conversation: WEATHER is asked (the agent calls get_weather, the SDK runs it, and the
// reply to its output follows); then STORY is asked, and BARGE is spoken over the story's reply about a
// second into its audio (and answered).
//
// What it prints for tests/agent/test_client_agents_js.py, one JSON object a line ("ms": since it started):
//   {"kind": "server", "event": {...}}              every raw server event the transport saw ('*'), in order;
//                                                   an audio delta's base64 is replaced by "" ("audio_bytes": N)
//   {"kind": "client", "event": {...}}              every event the SDK sent (audio appends only counted)
//   {"kind": "parse_failure", "type", "issues"}     a server event of a type the SDK knows that its own zod
//                                                   schema rejects (the SDK drops such an event silently)
//   {"kind": "error", "error"}                      an `error` the RealtimeSession emitted
//   {"kind": "log", "level", "text"}                anything the SDK logged with console.error or console.warn
//   {"kind": "crash", "error"}                      an uncaught exception or unhandled rejection
//   {"kind": "tool", "name", "arguments", "output"} get_weather ran in the SDK
//   {"kind": "session", "what", ...}                the RealtimeSession's own events (audio_interrupted, ...)
//   {"kind": "phase", "name"} / {"kind": "timeout", "phase"}   the script's progress (it goes on after a timeout)
//   {"kind": "history", "history"} and {"kind": "done", "appends"}   at the end

import { readFileSync } from 'node:fs';
import { OpenAIRealtimeWebSocket, RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';
import { WebSocket } from 'ws';
import { z } from 'zod';

// The SDK's own schemas for the server events it knows: parseRealtimeEvent treats an event that fails its
// schema as an unknown ("generic") one and acts on nothing in it, without a word. Checked here, so that a
// failure shows. (Same module instance the SDK loaded: the package's exports map only hides the path.)
const { realtimeServerEventSchema } = await import(
  new URL('./node_modules/@openai/agents-realtime/dist/openaiRealtimeEvents.mjs', import.meta.url));

const RATE = 24000;
const CHUNK_MS = 40;
const CHUNK_BYTES = (RATE * 2 * CHUNK_MS) / 1000;
const TIMEOUTS_MS = { connect: 5000, weather: 25000, story: 15000, barge: 15000 };
const BARGE_AFTER_MS = 1000; // how long the story's reply plays before the user talks over it

const [url, ...pcmPaths] = process.argv.slice(2);
if (!url || pcmPaths.length !== 3) {
  process.stderr.write('usage: node agents_js_client.mjs WS_URL WEATHER.pcm STORY.pcm BARGE.pcm\n');
  process.exit(2);
}
const [weatherPcm, storyPcm, bargePcm] = pcmPaths.map((path) => readFileSync(path));

const started = Date.now();
function out(line) {
  process.stdout.write(JSON.stringify({ ...line, ms: Date.now() - started }) + '\n');
}

function describe(error) {
  if (error instanceof Error) {
    return { name: error.name, message: error.message, stack: error.stack };
  }
  try {
    return JSON.parse(JSON.stringify(error, (_key, value) => (value instanceof Error
      ? { name: value.name, message: value.message } : value)));
  } catch {
    return String(error);
  }
}

// What the SDK logs as a failure (its logger's error and warn are console.error and console.warn).
for (const level of ['error', 'warn']) {
  console[level] = (...args) => out({
    kind: 'log', level,
    text: args.map((arg) => (typeof arg === 'string' ? arg : JSON.stringify(describe(arg)))).join(' '),
  });
}
process.on('uncaughtException', (error) => out({ kind: 'crash', error: describe(error) }));
process.on('unhandledRejection', (error) => out({ kind: 'crash', error: describe(error) }));

// The events the SDK sends, seen on the wire (the `ws` package is the one its Node shim opens).
let appends = 0;
const send = WebSocket.prototype.send;
WebSocket.prototype.send = function (data, ...rest) {
  try {
    const event = JSON.parse(String(data));
    if (event.type === 'input_audio_buffer.append') {
      appends += 1;
    } else {
      out({ kind: 'client', event });
    }
  } catch {
    out({ kind: 'client', raw: String(data).slice(0, 200) });
  }
  return send.call(this, data, ...rest);
};

const known = new Set(realtimeServerEventSchema.options.map((option) => option.shape.type.value));
const seen = []; // raw server events, in order
const waiters = new Set();

function changed() {
  for (const check of [...waiters]) {
    check();
  }
}

// Resolves with what `predicate` found, or null once the phase's time is up (a "timeout" line says so):
// the script goes on, so that one gap does not hide the next.
function waitFor(phase, predicate) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      waiters.delete(check);
      out({ kind: 'timeout', phase });
      resolve(null);
    }, TIMEOUTS_MS[phase]);
    function check() {
      const found = predicate();
      if (found) {
        clearTimeout(timer);
        waiters.delete(check);
        resolve(found);
      }
    }
    waiters.add(check);
    check();
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const tools = [];
const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: z.object({ city: z.string() }),
  async execute({ city }) {
    const output = `It is sunny in ${city}.`;
    tools.push({ city, output });
    out({ kind: 'tool', name: 'get_weather', arguments: { city }, output });
    changed();
    return output;
  },
});
const agent = new RealtimeAgent({
  name: 'Assistant',
  instructions: 'You are a helpful voice assistant. Keep your answers short.',
  tools: [getWeather],
});
const transport = new OpenAIRealtimeWebSocket();
const session = new RealtimeSession(agent, { transport });

const playing = new Map(); // response id -> { firstAt, ms }: when its audio began, and how long it is
transport.on('*', (event) => {
  const line = { kind: 'server', event };
  if (event.type === 'response.output_audio.delta' && typeof event.delta === 'string') {
    line.audio_bytes = Buffer.from(event.delta, 'base64').length;
    event.delta = '';
    const audio = playing.get(event.response_id) ?? { firstAt: Date.now(), ms: 0 };
    audio.ms += (line.audio_bytes / 2 / RATE) * 1000;
    playing.set(event.response_id, audio);
  }
  out(line);
  seen.push(event);
  if (known.has(event.type)) {
    const parsed = realtimeServerEventSchema.safeParse(event);
    if (!parsed.success) {
      out({ kind: 'parse_failure', type: event.type, issues: parsed.error.issues });
    }
  }
  changed();
});
session.on('error', (error) => out({ kind: 'error', error: describe(error.error ?? error) }));
session.on('audio_interrupted', () => { out({ kind: 'session', what: 'audio_interrupted' }); changed(); });
session.on('agent_tool_start', (_context, _agent, used) => out({
  kind: 'session', what: 'agent_tool_start', tool: used.name,
}));
session.on('agent_tool_end', (_context, _agent, used, result) => out({
  kind: 'session', what: 'agent_tool_end', tool: used.name, result,
}));
session.on('agent_end', (_context, _agent, text) => out({ kind: 'session', what: 'agent_end', text }));

// The microphone: 40 ms of pcm16 every 40 ms, from the turn being said, else silence.
const said = [];
let saying = null; // { pcm, at, done }
let micOn = true;
async function microphone() {
  const silence = Buffer.alloc(CHUNK_BYTES);
  const start = Date.now();
  for (let n = 0; micOn; n += 1) {
    if (!saying && said.length > 0) {
      saying = said.shift();
      saying.at = 0;
    }
    let chunk = silence;
    if (saying) {
      chunk = Buffer.alloc(CHUNK_BYTES);
      saying.pcm.copy(chunk, 0, saying.at, Math.min(saying.at + CHUNK_BYTES, saying.pcm.length));
      saying.at += CHUNK_BYTES;
      if (saying.at >= saying.pcm.length) {
        saying.done();
        saying = null;
      }
    }
    const bytes = chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.byteLength);
    session.sendAudio(bytes);
    const due = start + (n + 1) * CHUNK_MS;
    await sleep(Math.max(0, due - Date.now()));
  }
}

function say(name, pcm) {
  out({ kind: 'phase', name: `say ${name}` });
  return new Promise((resolve) => said.push({
    pcm,
    done: () => {
      out({ kind: 'phase', name: `said ${name}` });
      resolve();
    },
  }));
}

const after = (index, type, test = () => true) => seen.slice(index).find((event) => event.type === type && test(event));

let mic;
try {
  out({ kind: 'phase', name: 'connect' });
  await session.connect({ apiKey: 'lyre-has-no-key', url });
  await waitFor('connect', () => after(0, 'session.updated', (event) => (event.session?.tools ?? []).length > 0));
  mic = microphone();

  // A turn the agent answers with a call of the tool the SDK holds; then the reply to the tool's output.
  const weatherAt = seen.length;
  await say('weather', weatherPcm);
  const calls = (event) => (event.response?.output ?? []).some((item) => item.type === 'function_call');
  const sunny = await waitFor('weather', () => {
    if (tools.length === 0) { // answered without a call of get_weather: no use waiting
      const committed = seen.findIndex((event, i) => i >= weatherAt && event.type === 'input_audio_buffer.committed');
      return committed >= 0 && after(committed, 'response.done', (event) => event.response?.status === 'completed');
    }
    // the response the SDK asked for with the tool's output, done
    const output = seen.findIndex((event, i) => i >= weatherAt && event.type === 'response.output_item.done'
      && event.item?.type === 'function_call');
    return output >= 0 && after(output + 1, 'response.done', (event) => !calls(event));
  });
  // A person hears the answer out before the next question: until its audio has played (when it comes
  // faster than real time), speech would be talking over it.
  const played = sunny && playing.get(sunny.response?.id);
  await sleep(played ? Math.max(0, played.firstAt + played.ms - Date.now()) + 300 : 0);

  // A long reply, talked over a second into its audio; the sentence said over it is a turn of its own,
  // answered (its reply's transcript is enough: no need to wait for all of its audio).
  const storyAt = seen.length;
  await say('story', storyPcm);
  await waitFor('story', () => {
    // the reply to the story's turn: the first response created after its audio was committed
    const committed = seen.findIndex((event, i) => i >= storyAt && event.type === 'input_audio_buffer.committed');
    const created = committed >= 0 && after(committed, 'response.created');
    return created && after(committed, 'response.output_audio.delta',
      (event) => event.response_id === created.response?.id);
  });
  await sleep(BARGE_AFTER_MS);
  const bargeAt = seen.length;
  await say('barge', bargePcm);
  await waitFor('barge', () => {
    const committed = seen.findIndex((event, i) => i >= bargeAt && event.type === 'input_audio_buffer.committed');
    const created = committed >= 0 && after(committed, 'response.created');
    return created && after(committed, 'response.output_audio_transcript.delta',
      (event) => event.response_id === created.response?.id);
  });
  out({ kind: 'phase', name: 'finished' });
} catch (error) {
  out({ kind: 'crash', error: describe(error) });
} finally {
  micOn = false;
  await mic;
  await sleep(300); // the last events in flight (a conversation.item.retrieved, say)
  out({ kind: 'history', history: session.history });
  out({ kind: 'done', appends });
  session.close();
  process.exit(0);
}
