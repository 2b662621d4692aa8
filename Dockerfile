# lyre on a CPU (the demo model); GPU images start from an image with CUDA's torch instead.
FROM python:3.11-slim
WORKDIR /app
COPY . .
RUN bash scripts/setup.sh
ENV PATH=/app/.venv/bin:$PATH
ENTRYPOINT ["lyre"]
