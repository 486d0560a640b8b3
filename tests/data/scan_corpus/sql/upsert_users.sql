INSERT INTO app.users (user_id, email)
SELECT user_id, email FROM staging.users
ON CONFLICT (user_id) DO UPDATE SET email = excluded.email;
