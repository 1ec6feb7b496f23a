/* desktop.h - the room node/desktop: a sandbox's X desktop for its owner
 * (POST .../desktop/screenshot, .../desktop/mouse, .../desktop/keyboard and
 * GET .../desktop/stream; docs/API.md, "Desktop").
 *
 * Everything runs inside the sandbox, as the exec default user, through the
 * ordinary exec path of the guest agent (no protocol of its own): the tools
 * of the `desktop` template (Xvfb, xfce4, xdotool, scrot, x11vnc,
 * websockify). Every value a request gives is checked here and passed as
 * one argv word; the only shell text is fixed in desktop.c.
 */
#ifndef AIRLOCK_NODE_DESKTOP_H
#define AIRLOCK_NODE_DESKTOP_H

#include "../model/model.h"

#define DESKTOP_DISPLAY ":0"
#define DESKTOP_WIDTH 1024             /* the screen the node starts: E2B's default */
#define DESKTOP_HEIGHT 768
#define DESKTOP_COORD_MAX 16383        /* x, y: what X itself allows (15 bits) */
#define DESKTOP_TEXT_MAX 4096          /* bytes of one keyboard `type` */
#define DESKTOP_PNG_MAX (16u << 20)    /* a screenshot's bytes */
#define DESKTOP_VNC_PORT 5900          /* x11vnc, on the sandbox's loopback */
#define DESKTOP_NOVNC_PORT 6080        /* websockify + noVNC's page, loopback */

/* rest: "screenshot", "mouse", "keyboard" or "stream" (the last segment). */
void handle_desktop(struct node *n, struct sandbox *sb, const char *rest, struct http_req *req,
		    struct http_conn *c);

/* desktop-input.c: a mouse or keyboard body, checked, as xdotool's argv
 * (after "xdotool"): NULL-terminated in argv[0..cap-1], words pointing into
 * body or static text, or into buf (bufcap bytes: numbers, key names). NULL when it is
 * good; else the error's code with msg filled. Pure: the unit test and the
 * fuzz target call them. */
const char *desktop_mouse_argv(const json *body, const char **argv, size_t cap, char *buf,
			       size_t bufcap, char *msg, size_t msgsz);
const char *desktop_keyboard_argv(const json *body, const char **argv, size_t cap, char *buf,
				  size_t bufcap, char *msg, size_t msgsz);

#endif
