/* readiness.c - one component's readiness as JSON (readiness.h). */
#include "readiness.h"

void readiness_component(struct jw *w, const char *name, const char *status, const char *error)
{
	jw_key(w, name);
	jw_obj(w);
	jw_key(w, "status");
	jw_str(w, status);
	if (error) {
		jw_key(w, "error");
		jw_str(w, error);
	}
	jw_end(w);
}
