"""The chat panel's stable CSS classes and its own style sheet (no script).

    >>> CSS_CLASSES["send"]
    'gpucloud-chat-send'
"""

from __future__ import annotations

__all__ = ["CSS_CLASSES", "GROUP_SIZE", "STYLE_SHEET"]

#: Every stable CSS class the panel puts on its parts (for browser tests and custom styling).
CSS_CLASSES = {
    "root": "gpucloud-chat",
    "model": "gpucloud-chat-model",
    "temperature": "gpucloud-chat-temperature",
    "max_tokens": "gpucloud-chat-max-tokens",
    "system": "gpucloud-chat-system",
    "clear": "gpucloud-chat-clear",
    "messages": "gpucloud-chat-messages",
    "message": "gpucloud-chat-message",
    "user": "gpucloud-chat-message-user",
    "assistant": "gpucloud-chat-message-assistant",
    "streaming": "gpucloud-chat-streaming",
    "stopped": "gpucloud-chat-stopped",
    "error": "gpucloud-chat-error",
    "input": "gpucloud-chat-input",
    "send": "gpucloud-chat-send",
    "stop": "gpucloud-chat-stop",
    "attachments": "gpucloud-chat-attachments",
    "attachment": "gpucloud-chat-attachment",
    "upload_image": "gpucloud-chat-upload-image",
    "upload_audio": "gpucloud-chat-upload-audio",
    "audio_send": "gpucloud-chat-audio-send",
    "upload_hint": "gpucloud-chat-upload-hint",
    "status": "gpucloud-chat-status",
    "style": "gpucloud-chat-style",
}


GROUP_SIZE = 4  # block widgets per sub-box of a streamed reply (keeps each children update small)

# Our own style sheet, no script: an HTML widget may carry a <style> element.
STYLE_SHEET = """<style>
.gpucloud-chat-messages{max-height:32em;overflow-y:auto}
.gpucloud-chat-message{border-radius:6px;padding:2px 10px;margin:4px 0}
.gpucloud-chat-message::before{font-size:0.75em;opacity:0.6}
.gpucloud-chat-message-user{background:var(--jp-layout-color2,#eef2f7);margin-left:12%}
.gpucloud-chat-message-user::before{content:"You"}
.gpucloud-chat-message-assistant{border:1px solid var(--jp-border-color2,#ddd);margin-right:6%}
.gpucloud-chat-message-assistant::before{content:"Assistant"}
.gpucloud-chat-streaming{border-style:dashed}
.gpucloud-chat-message .widget-html,.gpucloud-chat-error.widget-html{height:auto;margin:0}
.gpucloud-chat-message .widget-html-content,.gpucloud-chat-error .widget-html-content{
line-height:1.5;white-space:normal}
.gpucloud-chat-message p{margin:0.35em 0}
.gpucloud-chat-message pre{white-space:pre;overflow-x:auto;padding:6px;
background:var(--jp-layout-color2,#f5f5f5)}
.gpucloud-chat-message code{white-space:pre-wrap}
.gpucloud-chat-message pre code{white-space:pre}
.gpucloud-chat-error{color:#b00020}
.gpucloud-chat-upload-hint .widget-html-content{line-height:1.3;opacity:0.75}
.gpucloud-chat-stopped{opacity:0.7;font-style:italic}
</style>"""
